/* pi0::Transforms (inference/model/pi0transforms.h) against openpi's own transform code: the
 * goldens in tests/parity/openpi_transforms/golden.json were made by running openpi's
 * transforms.py and its ALOHA, LIBERO and DROID policy files (numpy, from the openpi commit the file names) on
 * fixed arrays (tests/parity/make_openpi_transforms_golden.py). Then the same transforms inside
 * pi0::open_policy(), around the norm stats, on builtin:pi0-tiny. */
#include <cmath>
#include <fstream>
#include <set>

#include "inference/io/pi0error.h"
#include "inference/io/pi0normstats.h"
#include "inference/io/pi0tokenizer.h"
#include "inference/model/pi0openpolicy.h"
#include "inference/model/pi0transforms.h"
#include "common/pi0json.h"
#include "tests/pi0testmodel.h"
#include "common/pi0transformnames.h"

using namespace pi0test;

namespace
{

const pi0::json::Value &
golden ()
{
  static const pi0::json::Value g = [] {
    std::string error;
    auto v = pi0::json::load_strict (
        source_root () + "/tests/parity/openpi_transforms/golden.json", &error);
    if (!v)
      throw std::runtime_error (error);
    return *v;
  }();
  return g;
}

std::vector<double>
flat (const pi0::json::Value &v)
{
  std::vector<double> out;
  if (v.is_array () && !v.empty () && v[0].is_array ())
    for (const auto &row : v)
      for (const auto &x : row)
        out.push_back (x.get<double> ());
  else
    for (const auto &x : v)
      out.push_back (x.get<double> ());
  return out;
}

double
max_diff (const std::vector<double> &a, const std::vector<double> &b)
{
  if (a.size () != b.size ())
    return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size (); i++)
    m = std::max (m, std::fabs (a[i] - b[i]));
  return m;
}

at::Tensor
tensor (const std::vector<double> &v, at::IntArrayRef shape)
{
  return at::tensor (v, at::kDouble).reshape (shape);
}

std::vector<double>
values (const at::Tensor &t)
{
  at::Tensor c = t.to (at::kDouble).contiguous ();
  return std::vector<double> (c.data_ptr<double> (), c.data_ptr<double> () + c.numel ());
}

/* The case's norm stats as an openpi norm_stats.json would hold them. */
pi0::NormStats
norm_stats (const pi0::json::Value &c)
{
  pi0::json::Value doc;
  doc["norm_stats"] = c["norm_stats"];
  return pi0::NormStats::from_json_text (doc.dump (), "golden");
}

struct Case {
  std::string set;        // the set's key: the transforms, and "+quantile" for pi0.5's configs
  std::string transforms; // the transforms' name
  pi0::NormMode norm;     // openpi's Normalize: quantiles for every model type but pi0
  int index;
  const pi0::json::Value *v;
};

std::vector<Case>
cases ()
{
  std::vector<Case> out;
  for (auto it = golden ()["sets"].begin (); it != golden ()["sets"].end (); ++it) {
    int i = 0;
    const auto &set = it.value ();
    const std::string transforms =
        set.contains ("transforms") ? set["transforms"].get<std::string> () : it.key ();
    const pi0::NormMode norm = set.contains ("norm") && set["norm"] == "quantile"
                                   ? pi0::NormMode::Quantile
                                   : pi0::NormMode::ZScore;
    for (const auto &c : set["cases"])
      out.push_back ({it.key (), transforms, norm, i++, &c});
  }
  return out;
}

} // namespace

TEST (Transforms, TheGoldensComeFromOpenpiAndCoverEverySetAndConfig)
{
  EXPECT_EQ (golden ()["openpi_commit"].get<std::string> ().size (), 40u);
  for (const char *f : {"src/openpi/transforms.py", "src/openpi/policies/aloha_policy.py",
                        "src/openpi/training/config.py"})
    EXPECT_TRUE (golden ()["openpi_files"].contains (f)) << f;
  /* Every name but none has goldens, and every config maps to a name we implement. */
  std::set<std::string> covered;
  for (const Case &k : cases ())
    covered.insert (k.transforms);
  for (const char *name : pi0::kTransformNames) {
    if (std::string (name) != "none") {
      EXPECT_TRUE (covered.count (name)) << name;
    }
  }
  /* pi0.5's configs are there, with quantile normalization. */
  EXPECT_TRUE (golden ()["sets"].contains ("droid+quantile"));
  EXPECT_TRUE (golden ()["sets"].contains ("libero_absolute+quantile"));
  for (const auto &c : golden ()["configs"])
    EXPECT_NO_THROW (pi0::Transforms::by_name (c["transforms"].get<std::string> ()))
        << c["name"];
  EXPECT_GE (cases ().size (), 10u);
}

TEST (Transforms, StateActionsAndTheirInverseEqualOpenpis)
{
  for (const Case &k : cases ()) {
    SCOPED_TRACE (k.set + " case " + std::to_string (k.index));
    const auto &c = *k.v;
    const pi0::Transforms t = pi0::Transforms::by_name (k.transforms);
    const pi0::NormStats ns = norm_stats (c);
    const std::vector<double> state = flat (c["state"]);

    /* The robot state through the input transforms (AlohaInputs), then openpi's Normalize. */
    const std::vector<double> model_state = t.state_in (state);
    EXPECT_LT (max_diff (model_state, flat (c["transformed_state"])), 1e-12);
    at::Tensor normalized =
        ns.normalize_state (tensor (model_state, {(int64_t)state.size ()}), k.norm);
    EXPECT_LT (max_diff (values (normalized), flat (c["normalized_state"])), 1e-12);

    /* The model's output through Unnormalize and the output transforms (AbsoluteActions, then
     * AlohaOutputs / LiberoOutputs / DroidOutputs). */
    const auto &ma = c["model_actions"];
    const int rows = (int)ma.size (), cols = (int)ma[0].size ();
    at::Tensor un = ns.unnormalize_actions (tensor (flat (ma), {rows, cols}), k.norm, cols);
    const std::vector<double> robot =
        t.actions_out (values (un), rows, (int)un.size (1), model_state);
    const std::vector<double> expect = flat (c["actions"]);
    ASSERT_EQ (robot.size (), expect.size ());
    EXPECT_EQ (robot.size (), (size_t)rows * t.action_dims ());
    /* openpi adds the state after a Normalize/Unnormalize round trip: a few ulps. */
    EXPECT_LT (max_diff (robot, expect), 1e-12);

    /* The training direction (robot actions to the model's side), which real-time chunking's
     * prefix takes, and back. */
    const std::vector<double> ra = flat (c["robot_actions"]);
    const int arows = (int)c["robot_actions"].size ();
    const std::vector<double> in = t.actions_in (ra, arows, t.action_dims (), model_state);
    /* openpi's DeltaActions subtracts in place, in the robot actions' float32; this is float64
     * (the prefix is float32 after it): within float32's rounding of values below 4. */
    EXPECT_LT (max_diff (in, flat (c["transformed_actions"])), 5e-7);
    EXPECT_LT (max_diff (t.actions_out (in, arows, t.action_dims (), model_state), ra), 1e-9);
  }
}

TEST (Transforms, UnknownNamesAndWrongStatesAreRefusedWithTheirReason)
{
  try {
    pi0::Transforms::by_name ("bridge");
    ADD_FAILURE () << "opened";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("aloha_sim"), std::string::npos) << e.what ();
  }
  const pi0::Transforms aloha = pi0::Transforms::by_name ("aloha");
  EXPECT_THROW (aloha.state_in (std::vector<double> (8, 0.0)), pi0::Error);
  const pi0::Transforms libero = pi0::Transforms::by_name ("libero");
  EXPECT_THROW (libero.state_in (std::vector<double> (5, 0.0)), pi0::Error);
  /* Fewer action columns than the robot's: refused, not read past. */
  EXPECT_THROW (libero.actions_out (std::vector<double> (6, 0.0), 1, 6,
                                    std::vector<double> (8, 0.0)),
                pi0::Error);
  EXPECT_TRUE (pi0::Transforms::by_name ("").none ());
  EXPECT_TRUE (pi0::Transforms::by_name ("none").none ());
}

/* Inside open_policy(): with transforms=aloha the chain gives what the plain policy gives for
 * the transformed state, through AbsoluteActions and AlohaOutputs, in 14 robot dims. */
TEST (Transforms, OpenPolicyAppliesThemAroundTheNormStats)
{
  if (!pi0::Tokenizer::available ())
    GTEST_SKIP () << "built without libsentencepiece";
  const auto &c = golden ()["sets"]["aloha"]["cases"][0];
  TempDir dir;
  {
    pi0::json::Value doc;
    doc["norm_stats"] = c["norm_stats"];
    std::ofstream (dir.path () + "/norm_stats.json") << doc.dump ();
  }
  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.data_dirs = {source_root () + "/tests/data/tokenizer"};
  o.norm_stats = dir.path ();
  o.action_dims = 14;
  auto plain = pi0::open_policy ("builtin:pi0-tiny", o);
  o.action_dims = 0;
  o.transforms = "aloha";
  auto aloha = pi0::open_policy ("builtin:pi0-tiny", o);
  EXPECT_EQ (aloha->action_dims (), 14);
  EXPECT_NE (aloha->describe ().find ("transforms aloha"), std::string::npos);

  const pi0::Transforms t = pi0::Transforms::by_name ("aloha");
  const std::vector<double> state = flat (c["state"]);
  const std::vector<double> model_state = t.state_in (state);
  auto req = [&] (const std::vector<double> &s) {
    pi0::Request r;
    auto gen = at::make_generator<at::CPUGeneratorImpl> (7);
    r.images = at::empty ({3, 3, 32, 32}).uniform_ (-1, 1, gen);
    r.image_masks = at::ones ({3}, at::kBool);
    r.state = tensor (s, {(int64_t)s.size ()}).to (at::kFloat);
    r.prompt = "fold the towel";
    r.seed = 11;
    return r;
  };
  /* The robot's state goes in; the plain policy gets what the transforms make of it. */
  at::Tensor got = aloha->infer (req (state)).actions;
  ASSERT_EQ (got.sizes (), (std::vector<int64_t>{50, 14}));
  at::Tensor base = plain->infer (req (model_state)).actions; /* [50, 14], unnormalized */
  ASSERT_EQ (base.sizes (), (std::vector<int64_t>{50, 14}));
  const std::vector<double> expect = t.actions_out (values (base), 50, 14, model_state);
  /* The plain policy rounds the transformed state to float32 before Normalize. */
  EXPECT_LT (max_abs (got, tensor (expect, {50, 14})), 1e-4);
  /* And the transforms change something: the joints are deltas, the signs flip. */
  EXPECT_GT (max_abs (got, base), 1e-2);

  /* A state the transforms cannot take fails the request with the reason. */
  try {
    aloha->infer (req (std::vector<double> (7, 0.0)));
    ADD_FAILURE () << "inferred";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("14"), std::string::npos) << e.what ();
  }
  /* action-dims other than the transforms' is a settings error at open. */
  o.action_dims = 7;
  EXPECT_THROW (pi0::open_policy ("builtin:pi0-tiny", o), pi0::OpenError);
}
