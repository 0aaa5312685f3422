/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the docs say about the tree stays true, and the tree keeps its rules: every path of this
 * repository that the docs and the comments name exists; the README's "Layout" names every
 * folder and every Meson option; docs/testing.md's map of the tests is the tests/ tree; every
 * include is rooted at the source root, and only inference/ includes all of LibTorch. (The
 * element pages are checked against the elements in tests/project/test_plugin_docs.cpp.) No
 * GStreamer: plain files. */

#include "tests/pi0testenv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace
{

/* The source tree (tests/pi0testenv.h), as a path to join. */
const fs::path kRoot = pi0test::source_root ();

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
  std::vector<fs::path> out = {kRoot / "README.md"};
  static const std::set<std::string> exts = {".md", ".h", ".c", ".cpp", ".cu", ".build", ".sh",
                                             ".py", ".txt"};
  for (const char *top : kTop) {
    const fs::path d = kRoot / top;
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
  const fs::path full = kRoot / p;
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

/* A path such as `gst/viewmux/pi0muxer.h` or tests/pipelines/test_pipelines.cpp written anywhere in the
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
            missing.push_back (fs::relative (f, kRoot).string () + ":" + std::to_string (lineno) +
                               ": " + e);
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
  const std::string readme = slurp (kRoot / "README.md");
  const size_t at = readme.find ("## Layout");
  ASSERT_NE (at, std::string::npos);
  const std::string layout = readme.substr (at, readme.find ("\n## ", at + 1) - at);
  int folders = 0;
  for (const auto &e : fs::directory_iterator (kRoot)) {
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

  const std::string options = slurp (kRoot / "meson_options.txt");
  const std::regex option ("option\\('([a-z_]+)'");
  int n = 0;
  for (std::sregex_iterator m (options.begin (), options.end (), option), end; m != end; ++m) {
    n++;
    EXPECT_NE (readme.find ("`-D" + (*m)[1].str () + "="), std::string::npos)
        << "README.md does not name the Meson option " << (*m)[1].str ();
  }
  EXPECT_GE (n, 7);
}

namespace
{

/* Every file git would track below the source root (not the build trees, the Python
 * environments or other hidden folders), relative to it. */
std::vector<std::string>
tree_files ()
{
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator (kRoot);
       it != fs::recursive_directory_iterator (); ++it) {
    const std::string name = it->path ().filename ().string ();
    if (it->is_directory () &&
        (name[0] == '.' || name.rfind ("build", 0) == 0 || name == "subprojects" ||
         name == "__pycache__")) {
      it.disable_recursion_pending ();
      continue;
    }
    if (it->is_regular_file ())
      out.push_back (fs::relative (it->path (), kRoot).string ());
  }
  std::sort (out.begin (), out.end ());
  return out;
}

bool
is_code (const std::string &p)
{
  for (const char *e : {".c", ".cpp", ".h", ".cu"})
    if (p.size () > strlen (e) && p.compare (p.size () - strlen (e), std::string::npos, e) == 0)
      return true;
  return false;
}

/* The suites a test file defines: TEST (Suite, ...), TEST_F, TEST_P. */
std::set<std::string>
suites_of (const std::string &text)
{
  std::set<std::string> out;
  const std::regex test ("(^|\n)(TEST|TEST_F|TEST_P|TYPED_TEST)\\s*\\(\\s*([A-Za-z0-9_]+)");
  for (std::sregex_iterator m (text.begin (), text.end (), test), end; m != end; ++m)
    out.insert ((*m)[3].str ());
  return out;
}

} // namespace

/* docs/testing.md's "Where the tests are" is the tests/ tree: every test file has its row and
 * every row its file; a file's suites are exactly those its row lists, and no suite is in two
 * files; each element the plugin registers has rows, all under tests/elements/<factory>/, and
 * nothing else is there; and tests/meson.build builds every file. So a newcomer finds any
 * element's test binary (named after its file) from that page alone. */
TEST (ProjectDocs, TheTestMapIsTheTestsTree)
{
  const std::string doc = slurp (kRoot / "docs" / "testing.md");
  const size_t at = doc.find ("## Where the tests are");
  ASSERT_NE (at, std::string::npos);
  const std::string section = doc.substr (at, doc.find ("\n## ", at + 1) - at);
  const std::regex row ("\\n\\| `([^`]+)` \\| `(tests/[^`]+)` \\| ([^\\n]*) \\|");
  const std::regex name ("`([A-Za-z0-9_]+)`");
  std::map<std::string, std::string> of;            /* file -> what it tests */
  std::map<std::string, std::set<std::string>> listed; /* file -> suites */
  for (std::sregex_iterator m (section.begin (), section.end (), row), end; m != end; ++m) {
    const std::string file = (*m)[2].str (), cell = (*m)[3].str ();
    EXPECT_TRUE (of.emplace (file, (*m)[1].str ()).second) << file << " has two rows";
    for (std::sregex_iterator s (cell.begin (), cell.end (), name); s != end; ++s)
      listed[file].insert ((*s)[1].str ());
  }
  ASSERT_GE (of.size (), 40u);

  const std::string build = slurp (kRoot / "tests" / "meson.build");
  std::map<std::string, std::string> suite_file;
  int files = 0;
  for (const std::string &p : tree_files ()) {
    const std::string base = fs::path (p).filename ().string ();
    if (p.rfind ("tests/", 0) != 0 || base.rfind ("test_", 0) != 0 || !is_code (p))
      continue;
    files++;
    EXPECT_TRUE (of.count (p)) << p << " has no row in docs/testing.md";
    EXPECT_NE (build.find ("'" + p.substr (6) + "'"), std::string::npos)
        << "tests/meson.build does not build " << p;
    for (const std::string &s : suites_of (slurp (kRoot / p))) {
      EXPECT_TRUE (listed[p].count (s)) << p << " defines suite " << s << ", not in its row";
      auto [it, fresh] = suite_file.emplace (s, p);
      EXPECT_TRUE (fresh) << "suite " << s << " is in " << it->second << " and " << p;
    }
  }
  EXPECT_GE (files, 40);
  for (const auto &[file, suites] : listed) {
    EXPECT_TRUE (fs::exists (kRoot / file)) << "docs/testing.md names " << file;
    for (const std::string &s : suites)
      EXPECT_EQ (suite_file.count (s) ? suite_file[s] : "", file)
          << "docs/testing.md puts suite " << s << " in " << file;
  }

  /* The elements, as gst/gstpi0elements.cpp registers them. */
  const std::string reg = slurp (kRoot / "gst" / "gstpi0elements.cpp");
  const std::regex element ("GST_ELEMENT_REGISTER \\(([a-z0-9]+), plugin\\)");
  std::set<std::string> elements;
  for (std::sregex_iterator m (reg.begin (), reg.end (), element), end; m != end; ++m)
    elements.insert ((*m)[1].str ());
  EXPECT_EQ (elements.size (), 9u);
  for (const std::string &e : elements) {
    int rows = 0;
    for (const auto &[file, what] : of)
      if (what == e) {
        rows++;
        EXPECT_EQ (file.rfind ("tests/elements/" + e + "/", 0), 0u) << file << " tests " << e;
      }
    EXPECT_GE (rows, 1) << "element " << e << " has no test in docs/testing.md";
  }
  for (const auto &d : fs::directory_iterator (kRoot / "tests" / "elements"))
    EXPECT_TRUE (elements.count (d.path ().filename ().string ()))
        << "tests/elements/" << d.path ().filename ().string () << " is not an element";
}

/* Every quoted #include names its file from the source root ("gst/common/pi0notice.h",
 * "common/pi0json.h"), so that a path says which library it is; config.h is the build root's. */
TEST (ProjectDocs, EveryIncludeIsRootedAtTheSourceRoot)
{
  const std::regex include ("^\\s*#\\s*include\\s+\"([^\"]+)\"");
  int checked = 0;
  for (const std::string &p : tree_files ()) {
    if (!is_code (p))
      continue;
    std::stringstream lines (slurp (kRoot / p));
    std::string line;
    std::smatch m;
    while (std::getline (lines, line))
      if (std::regex_search (line, m, include) && m[1] != "config.h") {
        checked++;
        EXPECT_TRUE (fs::is_regular_file (kRoot / m[1].str ()))
            << p << ": #include \"" << m[1] << "\" is not a path from the source root";
      }
  }
  EXPECT_GE (checked, 300);
}

/* <torch/torch.h> (all of LibTorch's C++ API, ~30 s of a compile) only in inference/: public
 * headers expose at::Tensor from <ATen/core/Tensor.h>, and the few files outside that need more
 * include the narrower headers they use. */
TEST (ProjectDocs, OnlyInferenceIncludesAllOfLibTorch)
{
  const std::regex all ("^\\s*#\\s*include\\s+<torch/(torch|all)\\.h>");
  int files = 0;
  for (const std::string &p : tree_files ()) {
    if (!is_code (p))
      continue;
    files++;
    std::stringstream lines (slurp (kRoot / p));
    std::string line;
    while (std::getline (lines, line)) {
      if (std::regex_search (line, all)) {
        EXPECT_EQ (p.rfind ("inference/", 0), 0u) << p << " includes " << line;
      }
    }
  }
  EXPECT_GE (files, 200);
}
