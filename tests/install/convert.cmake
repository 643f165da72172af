# redwing convert: planning, repacking, hostile sources, and the CLI (interrupted runs, --force).
add_library(redwing_convert_fixture STATIC ${CMAKE_CURRENT_LIST_DIR}/convert_fixture.cpp)
target_link_libraries(redwing_convert_fixture PUBLIC redwing_install)
redwing_test(convert_test SOURCES convert_test.cpp LIBS redwing_convert_fixture LABELS unit)
redwing_test(convert_hostile_test SOURCES convert_hostile_test.cpp LIBS redwing_convert_fixture
  LABELS unit)
redwing_test(convert_cli_test SOURCES convert_cli_test.cpp LIBS redwing_convert_fixture
  LABELS integration)
