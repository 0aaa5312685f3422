/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tools/pi0-demo, the README's demo, run as a user would (through popen): its options, its output,
 * and a broken pipelines/demo.txt. */
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/pi0testenv.h"
#include "tests/pi0testrun.h"

#include <gtest/gtest.h>

using namespace pi0test;

namespace
{

/* tools/pi0-demo with @args; @env ("NAME=value ...") goes before it on the shell's line. */
CommandResult
run_demo (const std::string &args, const std::string &env = "")
{
  return run_command (env + " " + build_root () + "/tools/pi0-demo " + args);
}

bool
contains (const std::string &hay, const std::string &needle)
{
  return hay.find (needle) != std::string::npos;
}

} // namespace

/* pi0-demo checks --rtc against pi0infer's modes before it starts anything (no robot simulator,
 * no pipeline): a typo is a clear error, not a demo silently running without RTC. */
TEST (Pi0Demo, UnknownRtcModeIsAClearError)
{
  CommandResult r = run_demo ("--rtc guidd --duration 1");
  EXPECT_EQ (r.status, 2) << r.out;
  EXPECT_TRUE (contains (r.out, "--rtc: 'guidd' is not one of off, guided, guided-identity"))
      << r.out;
  EXPECT_FALSE (contains (r.out, "gst-pi0 demo:")) << "the demo must not start: " << r.out;
}

/* The demo runs pipelines/demo.txt (the line `pipelines/run.sh demo` runs) against the robot of
 * robot-7dof.json, the simulator publishing the state the line reads over UDP; its options
 * reach the line (--max-wait, --instruction, --rtc) and it prints what the README shows. */
TEST (Pi0Demo, RunsPipelinesDemoTxtAgainstTheRobotSimulator)
{
  CommandResult r = run_demo ("--duration 2 --stall-start 0.5 --stall-end 1.2 --max-wait 30 "
                       "--instruction 'stack \"the\" cups' --rtc guided");
  ASSERT_EQ (r.status, 0) << r.out;
  const std::string src = source_root () + "/pipelines/";
  EXPECT_TRUE (contains (r.out, "Chain: " + src + "demo.txt, robot: " + src + "robot-7dof.json"))
      << r.out;
  EXPECT_TRUE (contains (r.out, "Instruction: \"stack \"the\" cups\"")) << r.out;
  EXPECT_TRUE (contains (r.out, "rtc=guided)")) << r.out << "the option overrides the line's "
                                                             "guided-identity";
  EXPECT_TRUE (contains (r.out, "pi0viewmux (waits at most 30 ms)")) << r.out;
  EXPECT_TRUE (contains (r.out, "3 cameras (main 640x480 RGB 30 fps, side 320x240 NV12 15 fps, "
                                "top 1280x720 I420 10 fps)"))
      << r.out;
  EXPECT_TRUE (contains (r.out, "top  MASKED")) << "the stall shows: " << r.out;
  EXPECT_TRUE (contains (r.out, "warning from mux: Camera view 'top' recovered")) << r.out;
  EXPECT_TRUE (contains (r.out, "\nSummary: ")) << r.out;
  EXPECT_TRUE (contains (r.out, " action rows executed, 0 frames rejected, ")) << r.out;
  EXPECT_TRUE (contains (r.out, "capture -> sent (end to end)")) << r.out;
  EXPECT_FALSE (contains (r.out, "ERROR")) << r.out;
}

/* $PI0_DATA_DIR comes first; a line it cannot use is an error naming the file and what is
 * wrong, before the demo (or the robot simulator) starts. */
TEST (Pi0Demo, ABrokenDemoTxtIsAClearError)
{
  TempDir dir;
  ASSERT_TRUE (std::filesystem::create_directories (dir.path () + "/pipelines"));
  const std::string demo = dir.path () + "/pipelines/demo.txt";
  const std::string env = "PI0_DATA_DIR=" + dir.path ();
  const std::pair<const char *, const char *> cases[] = {
      {"# comment\nfakesrc num-buffers=${FRAMES} ! fakesink\n",
       ": ${FRAMES} has no value and no default"},
      {"fakesrc ! fakesink name=sink\n", " has no element named 'infer'"},
      {"fakesrc ! nosuchelement\n", ": no element \"nosuchelement\""},
  };
  for (const auto &c : cases) {
    ASSERT_TRUE (std::ofstream (demo) << c.first);
    CommandResult r = run_demo ("--duration 1", env);
    EXPECT_EQ (r.status, 1) << r.out;
    EXPECT_TRUE (contains (r.out, "pi0-demo: " + demo + c.second)) << r.out;
    EXPECT_FALSE (contains (r.out, "gst-pi0 demo:")) << "the demo must not start: " << r.out;
  }
}
