// openpi norm_stats.json: z-score and quantile formulas against numpy (tests/io_oracle.py),
// round trips, and malformed files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "inference/io/pi0error.h"
#include "inference/io/pi0normstats.h"
#include "tests/pi0testio.h"

using pi0test::expect_error;

namespace
{

std::vector<double>
random_vector (int n, double lo, double hi)
{
  auto t = torch::rand ({n}, torch::kFloat64) * (hi - lo) + lo;
  return std::vector<double> (t.data_ptr<double> (), t.data_ptr<double> () + n);
}

nlohmann::json
stats_entry (int dim)
{
  auto q01 = random_vector (dim, -3, -1);
  auto q99 = random_vector (dim, 1, 4);
  return {{"mean", random_vector (dim, -1, 1)},
          {"std", random_vector (dim, 0.05, 2)},
          {"q01", q01},
          {"q99", q99}};
}

std::vector<double>
to_vector (const torch::Tensor &t)
{
  auto c = t.to (torch::kFloat64).contiguous ().flatten ();
  return std::vector<double> (c.data_ptr<double> (), c.data_ptr<double> () + c.numel ());
}

void
expect_close (const torch::Tensor &got, const nlohmann::json &want, double rtol)
{
  const auto g = to_vector (got);
  std::vector<double> w;
  std::function<void (const nlohmann::json &)> flatten = [&] (const nlohmann::json &j) {
    if (j.is_array ())
      for (const auto &x : j)
        flatten (x);
    else
      w.push_back (j.get<double> ());
  };
  flatten (want);
  ASSERT_EQ (g.size (), w.size ());
  for (size_t i = 0; i < g.size (); i++)
    EXPECT_NEAR (g[i], w[i], rtol * (1 + std::abs (w[i]))) << i;
}

} // namespace

TEST (NormStats, FormulasMatchNumpy)
{
  PI0_REQUIRE_PYTHON ();
  torch::manual_seed (11);
  pi0test::TempDir dir;
  const nlohmann::json stats = {
      {"norm_stats", {{"state", stats_entry (7)}, {"actions", stats_entry (6)}}}};
  pi0test::write_bytes (dir.file ("norm_stats.json"), stats.dump (2));
  // A 5-dim state against 7-dim stats (openpi cuts the stats), 8-dim padded actions against
  // 6-dim stats (openpi pads mean 0 / std 1, quantile passes those dims through), 7 native dims.
  const auto state = torch::randn ({5}) * 2;
  const auto actions = torch::randn ({4, 8});
  const nlohmann::json input = {{"state", to_vector (state)},
                                {"actions",
                                 {to_vector (actions[0]), to_vector (actions[1]),
                                  to_vector (actions[2]), to_vector (actions[3])}},
                                {"native_dims", 7}};
  pi0test::write_bytes (dir.file ("input.json"), input.dump ());
  std::string out;
  ASSERT_TRUE (
      pi0test::run_oracle ({"norm", dir.file ("norm_stats.json"), dir.file ("input.json")}, &out))
      << out;
  const auto want = nlohmann::json::parse (out);

  const auto ns = pi0::NormStats::load (dir.path ()); // a directory holding norm_stats.json
  EXPECT_EQ (ns.state ().dim (), 7);
  EXPECT_EQ (ns.actions ().dim (), 6);
  const auto z = ns.normalize_state (state, pi0::NormMode::ZScore);
  EXPECT_EQ (z.scalar_type (), torch::kFloat32);
  EXPECT_EQ (z.sizes (), state.sizes ());
  // float32 results against numpy's float64: float32 rounding is the only difference.
  expect_close (z, want["state_zscore"], 1e-6);
  expect_close (ns.normalize_state (state, pi0::NormMode::Quantile), want["state_quantile"], 1e-6);
  const auto az = ns.unnormalize_actions (actions, pi0::NormMode::ZScore, 7);
  EXPECT_EQ (az.sizes (), torch::IntArrayRef ({4, 7}));
  expect_close (az, want["actions_zscore"], 1e-6);
  expect_close (ns.unnormalize_actions (actions, pi0::NormMode::Quantile, 7),
                want["actions_quantile"], 1e-6);
}

TEST (NormStats, RoundTripBothModes)
{
  torch::manual_seed (5);
  const auto entry = stats_entry (14);
  const auto ns = pi0::NormStats::from_json_text (
      nlohmann::json{{"norm_stats", {{"state", entry}, {"actions", entry}}}}.dump (), "same.json");
  const auto x = torch::randn ({3, 14}, torch::kFloat64);
  for (auto mode : {pi0::NormMode::ZScore, pi0::NormMode::Quantile}) {
    SCOPED_TRACE (pi0::norm_mode_name (mode));
    const auto n = ns.normalize_state (x, mode);
    EXPECT_EQ (n.scalar_type (), torch::kFloat64);
    // Pad to the model's 32 dims as the model would, then invert and cut back to 14.
    const auto padded = torch::cat ({n, torch::zeros ({3, 18}, torch::kFloat64)}, -1);
    const auto back = ns.unnormalize_actions (padded, mode, 14, torch::kFloat64);
    EXPECT_TRUE (torch::allclose (back, x, 1e-12, 1e-12));
  }
  // The quantile mode maps q01 to -1 and q99 to 1 (up to openpi's 1e-6 epsilon).
  const auto q01 = torch::tensor (entry["q01"].get<std::vector<double>> (), torch::kFloat64);
  const auto q99 = torch::tensor (entry["q99"].get<std::vector<double>> (), torch::kFloat64);
  EXPECT_TRUE (torch::allclose (ns.normalize_state (q01, pi0::NormMode::Quantile),
                                -torch::ones ({14}, torch::kFloat64)));
  EXPECT_TRUE (torch::allclose (ns.normalize_state (q99, pi0::NormMode::Quantile),
                                torch::ones ({14}, torch::kFloat64), 1e-5, 1e-5));
}

TEST (NormStats, ModeNames)
{
  EXPECT_EQ (pi0::norm_mode_from_string ("zscore"), pi0::NormMode::ZScore);
  EXPECT_EQ (pi0::norm_mode_from_string ("quantile"), pi0::NormMode::Quantile);
  expect_error ([] { pi0::norm_mode_from_string ("minmax"); }, {"minmax", "zscore or quantile"});
}

TEST (NormStats, MalformedFilesAreClearErrors)
{
  pi0test::TempDir dir;
  const std::string good_state =
      R"("state": {"mean": [0, 1], "std": [1, 2], "q01": [-1, -1], "q99": [1, 1]})";
  const std::string good_actions = R"("actions": {"mean": [0], "std": [1]})";
  const auto wrap = [] (const std::string &inner) {
    return "{\"norm_stats\": {" + inner + "}}";
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"not json", {"not valid JSON"}},
      {"[1, 2]", {"no \"norm_stats\" object"}},
      {R"({"state": {}})", {"no \"norm_stats\" object"}},
      {wrap (good_state), {"no \"actions\" entry"}},
      {wrap (good_actions), {"no \"state\" entry"}},
      {wrap (R"("state": [1, 2], )" + good_actions), {"norm_stats.state must be an object"}},
      {wrap (R"("state": {"std": [1]}, )" + good_actions),
       {"norm_stats.state", "missing \"mean\""}},
      {wrap (R"("state": {"mean": [1]}, )" + good_actions), {"missing \"std\""}},
      {wrap (R"("state": {"mean": [1, 2], "std": [1]}, )" + good_actions),
       {"\"std\" has 1 values but \"mean\" has 2"}},
      {wrap (R"("state": {"mean": [1, "x"], "std": [1, 1]}, )" + good_actions),
       {"\"mean\"[1] is not a number"}},
      {wrap (R"("state": {"mean": [[1, 2]], "std": [1]}, )" + good_actions),
       {"flat list of numbers"}},
      {wrap (R"("state": {"mean": [], "std": []}, )" + good_actions), {"non-empty list"}},
      {wrap (R"("state": {"mean": 3, "std": [1]}, )" + good_actions),
       {"non-empty list of numbers"}},
      {wrap (R"("state": {"mean": [1e400], "std": [1]}, )" + good_actions), {"1e400"}},
      {wrap (R"("state": {"mean": [0], "std": [-1]}, )" + good_actions), {"negative"}},
      {wrap (R"("state": {"mean": [0], "std": [1], "q01": [2], "q99": [1]}, )" + good_actions),
       {"q01", "above"}},
      {wrap (R"("state": {"mean": [0], "std": [1], "q01": [0]}, )" + good_actions),
       {"q01 but no q99"}},
      {wrap (R"("state": {"mean": [0], "std": [1], "q01": [0], "q99": [1, 2]}, )" + good_actions),
       {"\"q99\" has 2 values"}},
  };
  for (const auto &[text, parts] : cases) {
    SCOPED_TRACE (text);
    const auto path = dir.file ("norm_stats.json");
    pi0test::write_bytes (path, text);
    auto all = parts;
    all.push_back (path);
    expect_error ([&] { pi0::NormStats::load (path); }, all);
  }
  expect_error ([&] { pi0::NormStats::load (dir.file ("absent.json")); },
                {"absent.json", "cannot open", "No such file or directory"});
  // Issue 25: a FIFO with no writer blocked the start; /dev/zero read until killed.
  ASSERT_EQ (mkfifo (dir.file ("fifo.json").c_str (), 0600), 0);
  expect_error ([&] { pi0::NormStats::load (dir.file ("fifo.json")); },
                {"cannot read norm stats", "fifo.json: is a FIFO, not a regular file"});
  expect_error ([&] { pi0::NormStats::load ("/dev/zero"); },
                {"cannot read norm stats /dev/zero: is a character device"});
}

TEST (NormStats, MisuseIsAClearError)
{
  // q01/q99 are null in files computed without quantiles: fine for z-score, an error for quantile.
  const auto ns = pi0::NormStats::from_json_text (
      R"({"norm_stats": {"state": {"mean": [0, 1, 2], "std": [1, 1, 1], "q01": null, "q99": null},
                         "actions": {"mean": [0, 1], "std": [1, 1]}}})",
      "nq.json");
  EXPECT_NO_THROW (ns.normalize_state (torch::zeros ({3}), pi0::NormMode::ZScore));
  expect_error ([&] { ns.normalize_state (torch::zeros ({3}), pi0::NormMode::Quantile); },
                {"nq.json", "needs \"q01\" and \"q99\" for \"state\""});
  expect_error (
      [&] {
        ns.unnormalize_actions (torch::zeros ({2, 4}), pi0::NormMode::Quantile, 2);
      },
      {"for \"actions\""});
  expect_error ([&] { ns.normalize_state (torch::zeros ({32}), pi0::NormMode::ZScore); },
                {"state has 32 dims but the norm stats for \"state\" have 3", "before padding"});
  expect_error (
      [&] {
        ns.unnormalize_actions (torch::zeros ({2, 1}), pi0::NormMode::ZScore, 1);
      },
      {"have 2 dims but the model gives 1"});
  expect_error (
      [&] {
        ns.unnormalize_actions (torch::zeros ({2, 4}), pi0::NormMode::ZScore, 5);
      },
      {"native action dims 5 outside 1..4"});
  expect_error (
      [&] {
        ns.unnormalize_actions (torch::zeros ({2, 4}), pi0::NormMode::ZScore, 0);
      },
      {"outside"});
  expect_error ([&] { ns.normalize_state (torch::Tensor (), pi0::NormMode::ZScore); },
                {"at least one dimension"});
  // Integer state comes back as float32.
  EXPECT_EQ (
      ns.normalize_state (torch::ones ({3}, torch::kInt64), pi0::NormMode::ZScore).scalar_type (),
      torch::kFloat32);
}

/* Issue 16: 1e39 fits a double but not a float32: the state normalized with it, or the actions
 * unnormalized, became infinite. Refused at load like NaN, naming the file and the field. */
TEST (NormStats, ValuesBeyondFloat32AreRefusedAtLoad)
{
  pi0test::TempDir dir;
  const std::string good = R"({"mean": [0, 1], "std": [1, 2], "q01": [-1, -1], "q99": [1, 1]})";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"norm_stats": {"state": {"mean": [0, 1e39], "std": [1, 2]}, "actions": )" + good + "}}",
       {"norm_stats.state", "\"mean\"[1]", "1e+39"}},
      {R"({"norm_stats": {"state": )" + good +
           R"(, "actions": {"mean": [0, 1], "std": [-1e39, 2]}}})",
       {"norm_stats.actions", "\"std\"[0]"}},
      {R"({"norm_stats": {"state": )" + good +
           R"(, "actions": {"mean": [0], "std": [1], "q01": [0], "q99": [3.5e38]}}})",
       {"norm_stats.actions", "\"q99\"[0]", "float32"}},
  };
  for (const auto &[text, parts] : cases) {
    SCOPED_TRACE (text);
    const auto path = dir.file ("norm_stats.json");
    pi0test::write_bytes (path, text);
    auto all = parts;
    all.push_back (path);
    expect_error ([&] { pi0::NormStats::load (path); }, all);
  }
  // float32's largest value itself is fine.
  EXPECT_NO_THROW (pi0::NormStats::from_json_text (
      R"({"norm_stats": {"state": {"mean": [3.4e38], "std": [1]}, "actions": )" + good + "}}",
      "max.json"));
}

/* A key given twice is ambiguous (which mean?): refused, naming the key. */
TEST (NormStats, DuplicateKeyIsRefused)
{
  expect_error (
      [] {
        pi0::NormStats::from_json_text (
            R"({"norm_stats": {"state": {"mean": [0], "std": [1], "mean": [5]},
                               "actions": {"mean": [0], "std": [1]}}})",
            "dup.json");
      },
      {"dup.json", "'mean' more than once", "/norm_stats/state"});
}
