# The command of redwing_missing_prereq_test (tests/CMakeLists.txt): a test whose prerequisite
# WHAT was not found when configuring. It prints a skip (CTest shows the test as Skipped through
# its SKIP_REGULAR_EXPRESSION) or, under CI=true, fails: CI is supposed to have WHAT.
if("$ENV{CI}" STREQUAL "true" OR "$ENV{CI}" STREQUAL "1")
  message(FATAL_ERROR "missing prerequisite (CI=true, so this fails): ${WHAT}")
endif()
message("missing prerequisite: ${WHAT}\n[  SKIPPED ] ${WHAT} not found when configuring")
