// The chat page served at GET / (chat_page.html, compiled in by embed_file.cmake) and its icon.
#include "serve/chat_page_html.h"
#include "serve/server.h"

namespace rw::serve {

const std::string& ChatPageHtml() {
  static const std::string kPage(reinterpret_cast<const char*>(kChatPageHtml), kChatPageHtml_size);
  return kPage;
}

const std::string& FaviconSvg() {
  // A red wing on a rounded square; small enough to inline.
  static const std::string kIcon =
      R"SVG(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">)SVG"
      R"SVG(<rect width="32" height="32" rx="7" fill="#b3261e"/>)SVG"
      R"SVG(<path d="M5 22c6-1 10-5 13-12 1 5 0 9-3 12 4-1 7-4 9-8 1 6-3 11-9 12-4 1-7 )SVG"
      R"SVG(0-10-4z" fill="#fff"/></svg>)SVG";
  return kIcon;
}

}  // namespace rw::serve
