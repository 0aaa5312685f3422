/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common/pi0file: reading the files a user names (configurations, statistics) safely. */
#include "common/pi0file.h"
#include "tests/pi0testenv.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sys/stat.h>

using pi0test::TempDir;

/* Issue 25: robot-config=/dev/zero read until killed; a FIFO with no writer blocked the start
 * forever; "cannot read robot config empty.json: Success". Only regular files are read, up to
 * a cap, and the reason is the real one. */
TEST (File, ReadRegularFileRefusesWhatIsNotASmallRegularFileWithTheRealReason)
{
  TempDir d ("pi0-file");
  std::string text, err;
  EXPECT_FALSE (pi0::read_regular_file ("/dev/zero", 1 << 20, &text, &err));
  EXPECT_EQ (err, "/dev/zero: is a character device, not a regular file");
  EXPECT_FALSE (pi0::read_regular_file (d.path (), 1 << 20, &text, &err));
  EXPECT_EQ (err, d.path () + ": is a directory, not a regular file");
  const std::string fifo = d.path () + "/fifo";
  ASSERT_EQ (mkfifo (fifo.c_str (), 0600), 0);
  EXPECT_FALSE (pi0::read_regular_file (fifo, 1 << 20, &text, &err)) << "returned, not blocked";
  EXPECT_EQ (err, fifo + ": is a FIFO, not a regular file");
  EXPECT_FALSE (pi0::is_regular_file (fifo, &err));
  EXPECT_EQ (err, fifo + ": is a FIFO, not a regular file");
  EXPECT_FALSE (pi0::read_regular_file (d.path () + "/none.json", 1 << 20, &text, &err));
  EXPECT_EQ (err, d.path () + "/none.json: cannot open: No such file or directory");
  d.file ("big.json", std::string (2000, ' '));
  EXPECT_FALSE (pi0::read_regular_file (d.path () + "/big.json", 1000, &text, &err));
  EXPECT_EQ (err, d.path () + "/big.json: 2000 bytes is more than the 1000 this file may have");
  std::ofstream (d.path () + "/empty.json");
  text = "x";
  EXPECT_TRUE (pi0::read_regular_file (d.path () + "/empty.json", 1000, &text, &err)) << err;
  EXPECT_EQ (text, "");
  d.file ("ok.json", "{\"a\": 1}");
  EXPECT_TRUE (pi0::read_regular_file (d.path () + "/ok.json", 1000, &text, &err)) << err;
  EXPECT_EQ (text, "{\"a\": 1}");
  EXPECT_TRUE (pi0::is_regular_file (d.path () + "/ok.json", &err));
}
