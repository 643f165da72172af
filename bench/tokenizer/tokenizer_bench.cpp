// tokenizer_bench: how long the Gemma vocabulary takes to load and how fast text encodes/decodes.
//
//   tokenizer_bench [--tokenizer PATH/tokenizer.json] [--mb N] [--seed S]
//
// The text is generated English prose (Zipf-distributed common words, inflections, invented
// names, numbers, punctuation, paragraphs), so nothing large is committed. Encode is measured on
// the whole text in one call and paragraph by paragraph, with the chunk cache cold and warm, and
// with the speedups off (plain heap BPE over whole lines) for comparison.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

namespace {

// Common English words, most frequent first (split on spaces at startup).
const char kWordList[] =
    "the of and to a in is that it was for on are with as he she they be at one have this "
    "from or had by but what some we can out other were all there when up use your how said "
    "an each which do their time if will way about many then them would like so these her "
    "long make thing see him two has look more day could go come did number sound no most "
    "people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show "
    "every good me give our under name very through just form sentence great think say help "
    "low line differ turn cause much mean before move right boy old too same tell does set "
    "three want air well also play small end put home read hand port large spell add even "
    "land here must big high such follow act why ask men change went light kind off need "
    "house picture try us again animal point mother world near build self earth father head "
    "stand own page should country found answer school grow study still learn plant cover "
    "food sun four between state keep eye never last let thought city tree cross farm hard "
    "start might story saw far sea draw left late run while press close night real life few "
    "north open seem together next white children begin got walk example ease paper group "
    "always music those both mark often letter until mile river car feet care second book "
    "carry took science eat room friend began idea fish mountain stop once base hear horse "
    "cut sure watch color face wood main enough plain girl usual young ready above ever red "
    "list though feel talk bird soon body dog family direct pose leave song measure door "
    "product black short numeral class wind question happen complete ship area half rock "
    "order fire south problem piece told knew pass since top whole king space heard best "
    "hour better true during hundred five remember step early hold west ground interest "
    "reach fast verb sing listen six table travel less morning ten simple several vowel "
    "toward war lay against pattern slow center love person money serve appear road map rain "
    "rule govern pull cold notice voice unit power town fine certain fly fall lead cry dark "
    "machine note wait plan figure star box noun field rest correct able pound done beauty "
    "drive stood contain front teach week final gave green oh quick develop ocean warm free "
    "minute strong special mind behind clear tail produce fact street inch multiply nothing "
    "course stay wheel full force blue object decide surface deep moon island foot system "
    "busy test record boat common gold possible plane stead dry wonder laugh thousand ago "
    "ran check game shape equate miss brought heat snow tire bring yes distant fill east "
    "paint language among government committee research development understanding "
    "particularly unfortunately architecture memory model expert engine inference throughput "
    "latency hardware ";

const char kSuffixList[] = "s ed ing ly er est ness ment ful less able ation ize ized izing ism";
const char kSyllableList[] =
    "ka lo ven mar the ri dor an el wyn tor bel qui sha zu rem ost ia gar nil";

std::vector<std::string> SplitWords(const char* list) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = list; *p != '\0'; ++p) {
    if (*p == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(*p);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Deterministic prose of about `bytes` bytes.
std::string MakeProse(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> words = SplitWords(kWordList);
  const std::vector<std::string> suffixes = SplitWords(kSuffixList);
  const std::vector<std::string> syllables = SplitWords(kSyllableList);
  const size_t n_words = words.size();
  // Zipf-like: P(rank r) ~ 1 / (r + 2).
  std::vector<double> cdf(n_words);
  double acc = 0;
  for (size_t r = 0; r < n_words; ++r) cdf[r] = acc += 1.0 / static_cast<double>(r + 2);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto word = [&]() -> std::string {
    double x = u(rng) * acc;
    size_t r = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin());
    std::string w = words[std::min(r, n_words - 1)];
    double p = u(rng);
    if (p < 0.12) {
      w += suffixes[rng() % suffixes.size()];
    } else if (p < 0.15) {  // an invented name
      w.clear();
      for (int k = 0, m = 2 + static_cast<int>(rng() % 3); k < m; ++k)
        w += syllables[rng() % syllables.size()];
      w[0] = static_cast<char>(w[0] - 'a' + 'A');
    } else if (p < 0.17) {
      w = std::to_string(rng() % (p < 0.16 ? 100 : 100000));
    }
    return w;
  };
  std::string out;
  while (out.size() < bytes) {
    int sentences = 2 + static_cast<int>(rng() % 6);
    for (int s = 0; s < sentences; ++s) {
      int n = 4 + static_cast<int>(rng() % 20);
      for (int i = 0; i < n; ++i) {
        std::string w = word();
        if (i == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
        double p = u(rng);
        if (p < 0.02)
          w = "\"" + w + "\"";
        else if (p < 0.03)
          w = "(" + w + ")";
        out += w;
        if (i + 1 < n) {
          double q = u(rng);
          out += q < 0.07 ? ", " : q < 0.075 ? "; " : q < 0.08 ? " - " : " ";
        }
      }
      double e = u(rng);
      out += e < 0.8 ? "." : e < 0.9 ? "?" : "!";
      if (s + 1 < sentences) out += " ";
    }
    out += "\n\n";
  }
  return out;
}

std::vector<std::string> SplitParagraphs(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    end = end == std::string::npos ? text.size() : end + 2;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

double Mbps(size_t bytes, double seconds) {
  return static_cast<double>(bytes) / 1e6 / seconds;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Wall and thread-CPU time together: on a shared machine the CPU time is the fairer number.
struct Timer {
  rw::Stopwatch wall;
  double cpu0 = ThreadCpuSeconds();
  void Reset() {
    wall.Reset();
    cpu0 = ThreadCpuSeconds();
  }
  double Wall() const { return wall.Seconds(); }
  double Cpu() const { return ThreadCpuSeconds() - cpu0; }
};

}  // namespace

int main(int argc, char** argv) {
  std::string path = std::string(REDWING_BUILD_DIR) + "/testdata/gemma-tokenizer/tokenizer.json";
  double mb = 4.0;
  uint32_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) {
      path = argv[++i];
    } else if (a == "--mb" && i + 1 < argc) {
      mb = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = static_cast<uint32_t>(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: tokenizer_bench [--tokenizer tokenizer.json] [--mb N] [--seed S]\n");
      return 2;
    }
  }
  if (!rw::PathExists(path)) {
    std::fprintf(stderr,
                 "%s not found. Prepare it with: node tests/tokenizer/tokenizer_prepare.js <dir>\n"
                 "(or run the tokenizer_oracle_test once), or pass --tokenizer.\n",
                 path.c_str());
    return 1;
  }

  // Load: best and median of 5 (the file is in the page cache after the first).
  std::vector<double> load_wall, load_cpu;
  for (int i = 0; i < 5; ++i) {
    Timer t;
    auto tk = rw::Tokenizer::Load(path);
    load_wall.push_back(t.Wall() * 1e3);
    load_cpu.push_back(t.Cpu() * 1e3);
    if (!tk.ok()) {
      std::fprintf(stderr, "load failed: %s\n", tk.status().ToString().c_str());
      return 1;
    }
  }
  std::sort(load_wall.begin(), load_wall.end());
  std::sort(load_cpu.begin(), load_cpu.end());
  auto tok = rw::Tokenizer::Load(path);
  std::printf("tokenizer: %s\n", path.c_str());
  std::printf("%-26s best %.0f ms, median %.0f ms wall; best %.0f ms, median %.0f ms cpu\n",
              ("load (vocab " + std::to_string(tok->vocab_size()) + "):").c_str(), load_wall[0],
              load_wall[2], load_cpu[0], load_cpu[2]);

  const std::string text = MakeProse(static_cast<size_t>(mb * 1e6), seed);
  const std::vector<std::string> paragraphs = SplitParagraphs(text);
  std::printf("text: %.2f MB of generated English prose, %zu paragraphs\n",
              static_cast<double>(text.size()) / 1e6, paragraphs.size());
  auto report = [&](const char* what, size_t bytes, const Timer& t, const std::string& extra) {
    std::printf("%-26s %7.1f MB/s wall, %7.1f MB/s cpu%s\n", what, Mbps(bytes, t.Wall()),
                Mbps(bytes, t.Cpu()), extra.c_str());
  };

  Timer t;
  std::vector<int32_t> ids = tok->Encode(text);
  report("encode, cold cache:", text.size(), t,
         "  (" + std::to_string(ids.size()) + " tokens, " +
             std::to_string(static_cast<double>(text.size()) / static_cast<double>(ids.size()))
                 .substr(0, 4) +
             " bytes/token)");
  t.Reset();
  std::vector<int32_t> again = tok->Encode(text);
  report("encode, warm cache:", text.size(), t, "");
  t.Reset();
  size_t n_par = 0;
  for (const std::string& p : paragraphs) n_par += tok->Encode(p).size();
  report("encode, per paragraph:", text.size(), t, "");

  rw::TokenizerOptions no_cache;
  no_cache.enable_cache = false;
  auto tok_nc = rw::Tokenizer::Load(path, no_cache);
  t.Reset();
  std::vector<int32_t> ids_nc = tok_nc->Encode(text);
  report("encode, no cache:", text.size(), t, "");

  rw::TokenizerOptions plain;
  plain.enable_cache = false;
  plain.enable_chunking = false;
  auto tok_plain = rw::Tokenizer::Load(path, plain);
  t.Reset();
  std::vector<int32_t> ids_plain = tok_plain->Encode(text);
  report("encode, plain heap BPE:", text.size(), t, "  (whole lines: no chunks, no cache)");
  if (ids_nc != ids || ids_plain != ids || again != ids || n_par != ids.size()) {
    std::fprintf(stderr, "ERROR: the encode variants disagree\n");
    return 1;
  }

  t.Reset();
  std::string decoded = tok->Decode(ids);
  report("decode:", decoded.size(), t, "");
  t.Reset();
  rw::StreamDecoder stream(*tok);
  size_t streamed = 0;
  for (int32_t id : ids) streamed += stream.Push(id).size();
  streamed += stream.Flush().size();
  report("stream decode:", streamed, t,
         "  (" + std::to_string(static_cast<int>(static_cast<double>(ids.size()) / 1e3 / t.Cpu())) +
             "k tokens/s cpu)");
  if (decoded != text || streamed != text.size()) {
    std::fprintf(stderr, "ERROR: decode does not reproduce the text\n");
    return 1;
  }
  return 0;
}
