"""Renders the chat-template oracle cases with Python jinja2, configured the way transformers'
apply_chat_template configures it (sandboxed, trim_blocks, lstrip_blocks, loop controls, its
tojson and raise_exception). Reads the cases chat_oracle.js wrote.

usage: python3 chat_oracle.py <hf oracle json> <templates dir> <output.json>
"""

import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    hf_path, templates_dir, out_path = sys.argv[1:4]
    with open(hf_path, encoding="utf-8") as f:
        hf = json.load(f)
    cases = hf["cases"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    renders = {}
    names = sorted(os.listdir(templates_dir)) if os.path.isdir(templates_dir) else []
    for name in names:
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            template = env.from_string(f.read())
        out = []
        for c in cases:
            try:
                text = template.render(
                    messages=c["template_messages"],
                    tools=c["tools"],
                    add_generation_prompt=c["add_generation_prompt"],
                    enable_thinking=c["enable_thinking"],
                    bos_token="<bos>",
                    eos_token="<eos>",
                    pad_token="<pad>",
                    unk_token="<unk>",
                )
                out.append({"output": text})
            except Exception as e:  # noqa: BLE001 - every failure is recorded, not raised
                out.append({"error": f"{type(e).__name__}: {e}"})
        renders[name] = out
    jinja_renders = []
    for c in hf.get("jinja_cases", []):
        try:
            jinja_renders.append({"output": env.from_string(c["template"]).render(**c["context"])})
        except Exception as e:  # noqa: BLE001
            jinja_renders.append({"error": f"{type(e).__name__}: {e}"})
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"engine": f"jinja2 {jinja2.__version__}", "renders": renders, "jinja_renders": jinja_renders}, f,
                  ensure_ascii=False)
    print(f"rendered {len(cases)} cases x {len(renders)} templates -> {out_path}")


if __name__ == "__main__":
    main()
