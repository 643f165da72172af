# Tokenizer suites. tokenizer_test: synthetic tokenizer.json files, no external data (unit).
# tokenizer_oracle_test: the real Gemma vocabulary against @lenml/tokenizers and the llama.cpp
# vectors; it runs node (tests/tokenizer/tokenizer_prepare.js, tokenizer_oracle.js) once and caches
# the results under <build>/testdata/gemma-tokenizer/, and skips when node or the packages are
# missing (integration).
redwing_test(tokenizer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cpp
  LIBS redwing_tokenizer
  LABELS unit)
redwing_test(tokenizer_oracle_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_oracle_test.cpp
  LIBS redwing_tokenizer
  LABELS integration)
