/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common/pi0atomicfile: writing a file whole or not at all, what LeRobot's writer and the
 * safetensors writer put their files in place with. */
#include "common/pi0atomicfile.h"
#include "tests/pi0testenv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace
{

namespace fs = std::filesystem;

/* A temporary directory that can list what is in it. */
struct ScratchDir : pi0test::TempDir {
  ScratchDir () : TempDir ("pi0-atomicfile") {}
  /* Every name in the directory, sorted: what a failure must leave as it was. */
  std::vector<std::string> names () const
  {
    std::vector<std::string> n;
    for (const auto &e : fs::directory_iterator (path ()))
      n.push_back (e.path ().filename ().string ());
    std::sort (n.begin (), n.end ());
    return n;
  }
};

std::string
slurp (const std::string &path)
{
  std::ifstream in (path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf ();
  return s.str ();
}

pi0::FileWriter
text_writer (const std::string &text)
{
  return [text] (int fd, std::string *why) {
    return pi0::write_all (fd, text.data (), text.size (), why);
  };
}

} // namespace

TEST (AtomicFile, WritesAFileWholeAndLeavesNoTemporaryFile)
{
  ScratchDir d;
  std::string err;
  ASSERT_TRUE (pi0::write_file_atomic (d.file ("a.json"), text_writer ("{\"a\": 1}"), &err)) << err;
  EXPECT_EQ (slurp (d.file ("a.json")), "{\"a\": 1}");
  EXPECT_EQ (d.names (), std::vector<std::string>{"a.json"});
}

TEST (AtomicFile, ReplacesAnExistingFile)
{
  ScratchDir d;
  std::string err;
  std::ofstream (d.file ("a.bin"), std::ios::binary) << std::string (100, 'x');
  ASSERT_TRUE (pi0::write_file_atomic (d.file ("a.bin"), text_writer ("new"), &err)) << err;
  EXPECT_EQ (slurp (d.file ("a.bin")), "new");
  /* With a named temporary file, a stale one of that name (a crash's) is written over. */
  std::ofstream (d.file ("a.bin.part"), std::ios::binary) << "stale, longer than the new text";
  ASSERT_TRUE (
      pi0::write_file_atomic (d.file ("a.bin"), d.file ("a.bin.part"), text_writer ("newer"), &err))
      << err;
  EXPECT_EQ (slurp (d.file ("a.bin")), "newer");
  EXPECT_EQ (d.names (), std::vector<std::string>{"a.bin"});
}

/* The writer fills a temporary file next to the path (rename() is atomic only within one file
 * system), never the path itself: a reader meanwhile sees the old file. */
TEST (AtomicFile, WritesThroughATemporaryFileNextToThePath)
{
  ScratchDir d;
  std::string err;
  std::ofstream (d.file ("a.txt"), std::ios::binary) << "old";
  std::vector<std::string> during;
  ASSERT_TRUE (pi0::write_file_atomic (
      d.file ("a.txt"),
      [&] (int fd, std::string *why) {
        during = d.names ();
        EXPECT_EQ (slurp (d.file ("a.txt")), "old");
        return pi0::write_all (fd, "new", 3, why);
      },
      &err))
      << err;
  ASSERT_EQ (during.size (), 2u);
  EXPECT_EQ (during[0], "a.txt");
  EXPECT_EQ (during[1].rfind ("a.txt.tmp-", 0), 0u) << during[1];
  ASSERT_TRUE (pi0::write_file_atomic (
      d.file ("a.txt"), d.file ("a.txt.part"),
      [&] (int fd, std::string *why) {
        during = d.names ();
        return pi0::write_all (fd, "newer", 5, why);
      },
      &err))
      << err;
  EXPECT_EQ (during, (std::vector<std::string>{"a.txt", "a.txt.part"}));
  EXPECT_EQ (slurp (d.file ("a.txt")), "newer");
}

TEST (AtomicFile, AMissingDirectoryIsAMessageNamingThePath)
{
  ScratchDir d;
  std::string err;
  const std::string path = d.file ("no/such/dir/a.json");
  EXPECT_FALSE (pi0::write_file_atomic (path, text_writer ("x"), &err));
  EXPECT_EQ (err.rfind (path + ": cannot create " + path + ".tmp-", 0), 0u) << err;
  EXPECT_NE (err.find ("No such file or directory"), std::string::npos) << err;
  EXPECT_FALSE (pi0::write_file_atomic (path, path + ".part", text_writer ("x"), &err));
  EXPECT_EQ (err, path + ": cannot create " + path + ".part: No such file or directory");
  EXPECT_TRUE (d.names ().empty ());
}

/* A writer that fails or throws: the old file stays as it was, the temporary file goes, and the
 * message is the writer's reason after the path. */
TEST (AtomicFile, AFailedWriterLeavesTheOldFileAndNoTemporaryFile)
{
  ScratchDir d;
  std::string err;
  const std::string path = d.file ("a.json");
  std::ofstream (path, std::ios::binary) << "old";
  EXPECT_FALSE (pi0::write_file_atomic (
      path,
      [] (int fd, std::string *why) {
        pi0::write_all (fd, "half", 4, why);
        *why = "the disk is on fire";
        return false;
      },
      &err));
  EXPECT_EQ (err, path + ": the disk is on fire");
  EXPECT_EQ (slurp (path), "old");
  EXPECT_EQ (d.names (), std::vector<std::string>{"a.json"});
  EXPECT_THROW (pi0::write_file_atomic (
                    path, path + ".part",
                    [] (int fd, std::string *why) -> bool {
                      pi0::write_all (fd, "half", 4, why);
                      throw std::runtime_error ("out of memory");
                    },
                    &err),
                std::runtime_error);
  EXPECT_EQ (slurp (path), "old");
  EXPECT_EQ (d.names (), std::vector<std::string>{"a.json"});
  /* A bad descriptor's write fails with errno's text. */
  EXPECT_FALSE (pi0::write_all (-1, "x", 1, &err));
  EXPECT_EQ (err, "write failed: Bad file descriptor");
}

/* The rename itself failing (a directory where the file should go): the temporary file goes,
 * the directory stays. */
TEST (AtomicFile, AFailedRenameLeavesNoTemporaryFile)
{
  ScratchDir d;
  std::string err;
  const std::string path = d.file ("taken");
  fs::create_directories (path + "/inside");
  EXPECT_FALSE (pi0::write_file_atomic (path, path + ".part", text_writer ("x"), &err));
  EXPECT_EQ (err.rfind (path + ": cannot rename " + path + ".part into place: ", 0), 0u) << err;
  EXPECT_EQ (d.names (), std::vector<std::string>{"taken"});
  EXPECT_TRUE (fs::is_directory (path + "/inside"));
}

/* A file written by someone else (an encoder's video) put in place; when it is missing, the
 * message names the path and the file. */
TEST (AtomicFile, PublishesACompleteFile)
{
  ScratchDir d;
  std::string err;
  std::ofstream (d.file ("v.mp4.part"), std::ios::binary) << "video";
  ASSERT_TRUE (pi0::publish_file (d.file ("v.mp4.part"), d.file ("v.mp4"), &err)) << err;
  EXPECT_EQ (slurp (d.file ("v.mp4")), "video");
  EXPECT_EQ (d.names (), std::vector<std::string>{"v.mp4"});
  EXPECT_FALSE (pi0::publish_file (d.file ("w.mp4.part"), d.file ("w.mp4"), &err));
  EXPECT_EQ (err, d.file ("w.mp4") + ": cannot open " + d.file ("w.mp4.part") +
                      " to sync it: No such file or directory");
}
