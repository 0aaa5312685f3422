/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the docs say about the tree stays true: every path of this repository that the docs and
 * the comments name exists, and the README's "Layout" names every folder and every Meson option.
 * (The element pages are checked against the elements in test_pipelines: ElementDocs.) No
 * GStreamer: plain files. */

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace
{

fs::path
root ()
{
  const char *r = std::getenv ("PI0_SOURCE_ROOT");
  return r ? fs::path (r) : fs::path (".");
}

std::string
slurp (const fs::path &p)
{
  std::ifstream in (p);
  std::stringstream ss;
  ss << in.rdbuf ();
  return ss.str ();
}

/* The folders a path in the docs can start with: this repository's top-level folders. */
const char *const kTop[] = {"gst",   "kernels",  "inference", "protocol", "serve",  "lerobot",
                            "common", "tools",   "tests",     "pipelines", "bench", "docs",
                            "scripts", "models", ".ci"};

/* Every file the check reads: the Markdown pages and the sources with their comments. */
std::vector<fs::path>
files_to_check ()
{
  std::vector<fs::path> out = {root () / "README.md"};
  static const std::set<std::string> exts = {".md", ".h", ".c", ".cpp", ".cu", ".build", ".sh",
                                             ".py", ".txt"};
  for (const char *top : kTop) {
    const fs::path d = root () / top;
    if (!fs::is_directory (d))
      continue;
    for (auto it = fs::recursive_directory_iterator (d); it != fs::recursive_directory_iterator ();
         ++it) {
      const std::string name = it->path ().filename ().string ();
      /* Generated data and third-party checkouts are not ours to word. */
      if (it->is_directory () && (name == "data" || name == "golden" || name[0] == '.')) {
        it.disable_recursion_pending ();
        continue;
      }
      if (it->is_regular_file () && exts.count (it->path ().extension ().string ()))
        out.push_back (it->path ());
    }
  }
  return out;
}

/* "a/b.{h,cpp}" -> a/b.h and a/b.cpp; anything else as it is. */
std::vector<std::string>
expand_braces (const std::string &p)
{
  const size_t a = p.find ('{'), b = p.find ('}');
  if (a == std::string::npos || b == std::string::npos || b < a)
    return {p};
  std::vector<std::string> out;
  std::stringstream alts (p.substr (a + 1, b - a - 1));
  std::string alt;
  while (std::getline (alts, alt, ','))
    for (const std::string &rest : expand_braces (p.substr (b + 1)))
      out.push_back (p.substr (0, a) + alt + rest);
  return out;
}

/* @p names something: a file or folder, the stem of files (protocol/pi0safety for
 * pi0safety.{h,cpp}), or a program the folder's meson.build builds (bench/e2e). */
bool
names_something (const std::string &p)
{
  const fs::path full = root () / p;
  if (fs::exists (full))
    return true;
  const fs::path dir = full.parent_path ();
  const std::string stem = full.filename ().string ();
  if (!fs::is_directory (dir))
    return false;
  for (const auto &e : fs::directory_iterator (dir))
    if (e.path ().stem ().string () == stem)
      return true;
  const std::string build = slurp (dir / "meson.build");
  return build.find ("executable('" + stem + "'") != std::string::npos ||
         build.find ("executable(\'" + stem + "\'") != std::string::npos;
}

} // namespace

/* A path such as `gst/viewmux/pi0muxer.h` or tests/test_pipelines.cpp written anywhere in the
 * docs or the comments names a file or folder that exists: a move or a rename that forgets the
 * prose fails here. Placeholders (<name>, NAME, *, ...) are not paths; in code only comments
 * are read (an #include names a header from an include directory, a string may name a missing
 * file on purpose). An upstream file is named inside its package
 * ("datasets/compute_stats.py of lerobot"), never as lerobot/..., which reads as ours. */
TEST (ProjectDocs, EveryPathTheDocsNameExists)
{
  std::string tops;
  for (const char *t : kTop)
    tops += std::string (tops.empty () ? "" : "|") + (t[0] == '.' ? "\\.ci" : t);
  /* Not inside a word or a longer path (an upstream project's own lerobot/... or tools/...). */
  const std::regex path ("(^|[\\s`(\\[\"'=])((" + tops + ")/[A-Za-z0-9_.,{}/+-]*[A-Za-z0-9_}/])");
  int checked = 0;
  std::vector<std::string> missing;
  for (const fs::path &f : files_to_check ()) {
    const std::string ext = f.extension ().string ();
    const bool prose = ext == ".md" || ext == ".txt";
    const bool hash_comments = ext == ".py" || ext == ".sh" || ext == ".build";
    std::stringstream lines (slurp (f));
    std::string line;
    int lineno = 0;
    bool in_block = false; /* inside a C comment */
    while (std::getline (lines, line)) {
      lineno++;
      /* In code only the comments are prose: string literals may name a missing file on purpose,
       * build outputs are named relative to the build tree. */
      std::string words;
      if (prose) {
        words = line;
      } else if (hash_comments) {
        const size_t h = line.find ('#');
        words = h == std::string::npos ? "" : line.substr (h);
      } else {
        for (size_t i = 0; i < line.size (); i++) {
          if (!in_block && line.compare (i, 2, "/*") == 0) {
            in_block = true;
            i++;
          } else if (in_block && line.compare (i, 2, "*/") == 0) {
            in_block = false;
            i++;
          } else if (!in_block && line.compare (i, 2, "//") == 0) {
            words += line.substr (i);
            break;
          } else if (in_block) {
            words += line[i];
          }
        }
      }
      for (std::sregex_iterator m (words.begin (), words.end (), path), end; m != end; ++m) {
        const size_t after = (size_t)(m->position (2) + m->length (2));
        if (after < words.size () && (words[after] == '*' || words[after] == '<'))
          continue; /* a pattern: tests/test_io_*.cpp */
        std::string p = (*m)[2].str ();
        while (!p.empty () && (p.back () == '.' || p.back () == ','))
          p.pop_back ();
        if (p.find ("...") != std::string::npos || p.find ("NAME") != std::string::npos)
          continue;
        for (const std::string &e : expand_braces (p)) {
          checked++;
          if (!names_something (e))
            missing.push_back (fs::relative (f, root ()).string () + ":" +
                               std::to_string (lineno) + ": " + e);
        }
      }
    }
  }
  for (const auto &m : missing)
    ADD_FAILURE () << "names a path that does not exist: " << m;
  EXPECT_GE (checked, 100);
  std::printf ("%d paths named in the docs and comments checked\n", checked);
}

/* The README's "Layout" names every top-level folder, and its build section every Meson option. */
TEST (ProjectDocs, ReadmeNamesEveryFolderAndOption)
{
  const std::string readme = slurp (root () / "README.md");
  const size_t at = readme.find ("## Layout");
  ASSERT_NE (at, std::string::npos);
  const std::string layout = readme.substr (at, readme.find ("\n## ", at + 1) - at);
  int folders = 0;
  for (const auto &e : fs::directory_iterator (root ())) {
    const std::string name = e.path ().filename ().string ();
    /* Hidden folders (.git, .venv, .ci) and build trees are not the project's layout. */
    if (!e.is_directory () || name[0] == '.' || name.rfind ("build", 0) == 0 ||
        name == "subprojects")
      continue;
    folders++;
    EXPECT_NE (layout.find ("\n" + name + "/"), std::string::npos)
        << "README.md's Layout does not name " << name << "/";
  }
  EXPECT_GE (folders, 10);

  const std::string options = slurp (root () / "meson_options.txt");
  const std::regex option ("option\\('([a-z_]+)'");
  int n = 0;
  for (std::sregex_iterator m (options.begin (), options.end (), option), end; m != end; ++m) {
    n++;
    EXPECT_NE (readme.find ("`-D" + (*m)[1].str () + "="), std::string::npos)
        << "README.md does not name the Meson option " << (*m)[1].str ();
  }
  EXPECT_GE (n, 7);
}
