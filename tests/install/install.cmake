# redwing install: journal, resumable hash and HTTP parsing (unit); the CLI against the local fake
# hub in tests/fakehub (integration: equality with convert, faults, kill -9 + --resume, tokens);
# a ~0.7 GB checkpoint with bounded memory, peak RSS printed (slow).
redwing_test(install_test SOURCES install_test.cpp LIBS redwing_install LABELS unit)
redwing_test(install_hub_test SOURCES install_hub_test.cpp LIBS redwing_convert_fixture
  LABELS integration)
redwing_test(install_slow_test SOURCES install_hub_test.cpp LIBS redwing_convert_fixture
  LABELS slow)
target_compile_definitions(install_slow_test PRIVATE REDWING_INSTALL_SLOW=1)
# A DFlash drafter from the fake hub: equal to a local conversion, faults, --resume, the CLI.
redwing_test(drafter_install_test SOURCES drafter_install_test.cpp LIBS redwing_install
  LABELS integration)
