/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A pipelines/NAME.txt line read by a program instead of pipelines/run.sh, so that a chain is
 * written once: the '#' lines dropped and the rest joined (run.sh's `grep -v '^#' | tr '\n' ' '`),
 * then ${NAME} and ${NAME:-default} replaced as the shell would, but from the program's own
 * values rather than its environment. Header-only and without GStreamer, so a plain gtest
 * checks it (tests/tools/test_launch_line.cpp). */
#pragma once

#include <cctype>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace pi0::tools
{

using LineVars = std::map<std::string, std::string>;

/* The first of @dirs holding @rel (as @dir/@rel); "" with @error naming every place looked. */
inline std::string
find_data_file (const std::string &rel, const std::vector<std::string> &dirs, std::string *error)
{
  std::string looked;
  for (const auto &dir : dirs) {
    const std::string path = dir + "/" + rel;
    if (std::ifstream (path).good ())
      return path;
    looked += (looked.empty () ? "" : ", ") + path;
  }
  *error = rel + " not found (looked in: " + (looked.empty () ? "nowhere" : looked) + ")";
  return "";
}

/* The launch line in @path; false with @error when it cannot be read or holds only comments. */
inline bool
read_launch_line (const std::string &path, std::string *line, std::string *error)
{
  std::ifstream in (path);
  if (!in) {
    *error = "cannot read " + path;
    return false;
  }
  line->clear ();
  std::string l;
  while (std::getline (in, l)) {
    /* Only a '#' in the first column makes a comment, as for grep '^#': a '#' inside the line
     * (a caps value, an instruction) is the line's. */
    if (l.empty () || l[0] != '#')
      *line += l + " ";
  }
  if (line->find_first_not_of (" \t\r") == std::string::npos) {
    *error = path + " holds no launch line";
    return false;
  }
  return true;
}

/* @line with every ${NAME} and ${NAME:-default} replaced: NAME's value from @vars, or the
 * default when NAME is missing or empty (the shell's ":-"). A name with neither a value nor a
 * default is an error naming it; so is any other use of '$' (bare $NAME, $(...), nested
 * defaults), which the shell would expand and this would not, so a line never means two
 * things. Quotes are not special: the parser that reads the result handles them. */
inline bool
expand_line_vars (const std::string &line, const LineVars &vars, std::string *out,
                  std::string *error)
{
  out->clear ();
  for (size_t i = 0; i < line.size (); i++) {
    if (line[i] != '$') {
      *out += line[i];
      continue;
    }
    if (i + 1 >= line.size () || line[i + 1] != '{') {
      *error = "only ${NAME} and ${NAME:-default} are expanded, not '" + line.substr (i, 12) +
               "' (at character " + std::to_string (i + 1) + ")";
      return false;
    }
    const size_t close = line.find ('}', i + 2);
    if (close == std::string::npos) {
      *error = "unterminated '${' at character " + std::to_string (i + 1);
      return false;
    }
    const std::string body = line.substr (i + 2, close - i - 2);
    size_t n = 0;
    while (n < body.size () && (body[n] == '_' || std::isalnum ((unsigned char)body[n])))
      n++;
    const std::string name = body.substr (0, n);
    const bool has_default = body.compare (n, 2, ":-") == 0;
    if (name.empty () || std::isdigit ((unsigned char)name[0]) ||
        (n < body.size () && !has_default)) {
      *error = "'${" + body + "}' is not ${NAME} or ${NAME:-default}";
      return false;
    }
    const std::string fallback = has_default ? body.substr (n + 2) : "";
    if (fallback.find ('$') != std::string::npos) {
      *error = "the default of ${" + name + "} holds a '$': nested expansions are not supported";
      return false;
    }
    auto it = vars.find (name);
    if (it != vars.end () && !it->second.empty ())
      *out += it->second;
    else if (has_default)
      *out += fallback;
    else if (it == vars.end ()) {
      *error = "${" + name + "} has no value and no default";
      return false;
    } /* else set but empty, without a default: nothing, as in the shell */
    i = close;
  }
  return true;
}

} // namespace pi0::tools
