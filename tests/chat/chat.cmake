# Chat templates: the Jinja interpreter, the native Gemma 4 renderer and tool-call parsing.
redwing_test(chat_jinja_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_jinja_test.cpp
  LIBS redwing_chat LABELS unit)
redwing_test(chat_template_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cpp
  LIBS redwing_chat LABELS unit)
redwing_test(chat_tool_call_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_tool_call_test.cpp
  LIBS redwing_chat LABELS unit)
# Compares against @huggingface/jinja (node) and, when available, Python jinja2.
redwing_test(chat_oracle_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_oracle_test.cpp
  LIBS redwing_chat LABELS integration)
