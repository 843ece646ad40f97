// The report page (report.html), rendered from the report's JSON (RunReport::to_json) so that
// the page and report.json cannot disagree, and a report.json can be rendered again later.
// Charts are inline SVG drawn here: the page needs no script, font or style from anywhere.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ddl::launcher {

// The whole page. Fields missing from `report` (or null) are shown as "-"; it never throws for a
// report that RunReport::to_json produced.
std::string render_report_html(const nlohmann::json& report);

// `text` made safe as HTML element content and attribute values: & < > " ' become entities;
// bytes that are not valid UTF-8, and control characters other than tab and newline, become
// U+FFFD.
std::string html_escape(std::string_view text);

}  // namespace ddl::launcher
