/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench/vs-peers-chain, our side of bench/vs-peers, run as the driver runs it (commands on
 * stdin, one JSON line per observation) on pi0-tiny: what the bench compares must be what the
 * chain computed, for the observation asked for, with the noise the peers draw for it. The
 * figures' values are not checked (no timing in a test), only that they are figures. */
#include <gtest/gtest.h>

#include "common/pi0json.h"
#include "tests/pi0testenv.h"
#include "tests/pi0testrun.h"

#include <sstream>
#include <string>
#include <vector>

using pi0test::build_root;
using pi0test::run_command;
using pi0test::source_root;
using pi0test::TempDir;
using json = pi0::json::Value;

namespace
{

std::string
chain ()
{
  return build_root () + "/bench/vs-peers-chain";
}

std::string
worker_args (const std::string &obs)
{
  return " --obs " + obs + " --checkpoint builtin:pi0-tiny --size 32 --warmup 1 --tokenizer " +
         source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
}

/* The JSON lines of @out (the worker's answers; GStreamer's own lines are not JSON). */
std::vector<json>
answers (const std::string &out)
{
  std::vector<json> v;
  std::istringstream in (out);
  for (std::string l; std::getline (in, l);) {
    if (l.empty () || l[0] != '{')
      continue;
    std::string err;
    auto j = pi0::json::parse_strict (l, "answer", &err);
    EXPECT_TRUE (j.has_value ()) << err << ": " << l;
    if (j)
      v.push_back (*j);
  }
  return v;
}

class VsPeersChain : public ::testing::Test
{
protected:
  void SetUp () override
  {
    const auto r =
        run_command (chain () + " --make-obs " + tmp_.path () + "/obs --count 3 --state-dim 14");
    ASSERT_EQ (r.status, 0) << r.out;
  }
  std::string obs () const { return tmp_.path () + "/obs"; }
  TempDir tmp_{"vs-peers-chain"};
};

} // namespace

/* Observation 2, then 0, then 2 again: the same observation gives the same actions whatever ran
 * before it (its noise is the peers' noise for it, not the run's sequence), another observation
 * other actions; every figure is there and the parts lie inside the whole. */
TEST_F (VsPeersChain, AnObservationGivesItsOwnActionsWhateverRanBefore)
{
  const auto r =
      run_command ("printf 'run 2\\nrun 0\\nrun 2\\nquit\\n' | " + chain () + worker_args (obs ()));
  ASSERT_EQ (r.status, 0) << r.out;
  const std::vector<json> a = answers (r.out);
  ASSERT_EQ (a.size (), 4u) << r.out;
  EXPECT_TRUE (a[0].at ("ready").get<bool> ());
  for (size_t k = 1; k < 4; k++) {
    const json &j = a[k];
    ASSERT_EQ (j.at ("actions").size (), 50u); // pi0-tiny: 50 rows of its 32 action values
    ASSERT_EQ (j.at ("actions")[0].size (), 32u);
    EXPECT_GT (j.at ("forward_ms").get<double> (), 0.0);
    EXPECT_GE (j.at ("outside_ms").get<double> (), 0.0);
    EXPECT_NEAR (j.at ("whole_ms").get<double> (),
                 j.at ("forward_ms").get<double> () + j.at ("outside_ms").get<double> (), 1e-6);
    for (const auto &[name, ms] : j.at ("parts").items ()) {
      EXPECT_GE (ms.get<double> (), 0.0) << name;
      EXPECT_LE (ms.get<double> (), j.at ("whole_ms").get<double> ()) << name;
    }
  }
  EXPECT_EQ (a[1].at ("i").get<int> (), 2);
  EXPECT_EQ (a[2].at ("i").get<int> (), 0);
  EXPECT_EQ (a[1].at ("actions"), a[3].at ("actions"));
  EXPECT_NE (a[1].at ("actions"), a[2].at ("actions"));
}

/* --summary runs every observation and prints the driver's figures for our column. */
TEST_F (VsPeersChain, SummaryPrintsEveryFigure)
{
  const auto r = run_command (chain () + worker_args (obs ()) + " --summary");
  ASSERT_EQ (r.status, 0) << r.out;
  for (const char *row : {"| outside the model (ms) |", "| model forward (ms) |",
                          "| whole observation -> actions (ms) |", "| process CPU time (ms) |",
                          "| cudaprep |", "3 observations"})
    EXPECT_NE (r.out.find (row), std::string::npos) << row << "\n" << r.out;
}

/* What the driver can get wrong: a command out of range is answered with an error and the
 * worker goes on; a chain that cannot run (the model's image size not cudaprep's) ends at once
 * with the element's message, not after the 600 s a forward pass may take; no observations,
 * bad options: exit 2. */
TEST_F (VsPeersChain, BadCommandsAndBadChainsSayWhatIsWrong)
{
  auto r = run_command ("printf 'run 3\\nrun 0\\nquit\\n' | " + chain () + worker_args (obs ()));
  ASSERT_EQ (r.status, 0) << r.out;
  std::vector<json> a = answers (r.out);
  ASSERT_EQ (a.size (), 3u) << r.out;
  EXPECT_EQ (a[1].at ("error").get<std::string> (), "bad command: run 3");
  EXPECT_EQ (a[2].at ("i").get<int> (), 0);

  r = run_command ("printf 'run 0\\nquit\\n' | " + chain () + worker_args (obs ()) + " --size 64");
  EXPECT_EQ (r.status, 1) << r.out;
  EXPECT_NE (r.out.find ("set cudaprep width=32 height=32"), std::string::npos) << r.out;

  r = run_command (chain () + worker_args (tmp_.path () + "/none"));
  EXPECT_EQ (r.status, 2) << r.out;
  EXPECT_NE (r.out.find ("/none/manifest.json"), std::string::npos) << r.out;
  r = run_command (chain () + worker_args (obs ()) + " --size 0");
  EXPECT_EQ (r.status, 2) << r.out;
  r = run_command (chain () + " --make-obs " + tmp_.path () + "/x --count 0");
  EXPECT_EQ (r.status, 2) << r.out;
}
