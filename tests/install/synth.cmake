# redwing synth: generators, the tiny model, round trips through convert (unit); the CLI (integration).
redwing_test(synth_test SOURCES synth_test.cpp LIBS redwing_install redwing_format LABELS unit)
redwing_test(synth_cli_test SOURCES synth_cli_test.cpp LIBS redwing_base LABELS integration)
