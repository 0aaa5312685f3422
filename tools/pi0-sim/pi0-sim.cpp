/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-sim: the simulated world of the closed loop (sim/, docs/sim.md) from the command line.
 *
 *   pi0-sim snapshot --out DIR [--seed S] [--ticks N] [--width W] [--height H] [--robot-config F]
 *       the three cameras' views (DIR/overhead.png, front.png, wrist.png) of scene S after the
 *       expert has moved N ticks, and the scene as one JSON line on stdout
 *   pi0-sim expert [--episodes K] [--seed S] [--execute N] [--horizon H] [--robot-config F]
 *       K episodes (seeds S, S+1, ...) solved by the scripted expert, N rows of each H-row
 *       chunk (10) executed before it plans again: one JSON line per episode, then a summary
 *   pi0-sim run [--policy expert|MODEL] [--infer "PROPS"] [--episodes K] [--seed S]
 *               [--execute N] [--horizon H] [--width W] [--height H] [--prep-size P]
 *               [--record DIR [--lossless]] [--overlay DIR] [--rows FILE] [--real-time]
 *               [--robot-config F] [--timeout S]
 *       the same episodes through the chain, lock-step (pi0simloop.h; --real-time: on the
 *       clock, the cameras live, nothing waiting for the policy): the cameras and state
 *       into pi0viewmux, the policy (the expert, or pi0infer model=MODEL PROPS), the chunks
 *       to the robot over UDP; --record DIR appends each episode to a LeRobotDataset (--lossless:
 *       the cameras bit-exact)
 *   pi0-sim robot [--policy-host H] [--rtp-port P] [--bind A] [--port N] [--gap-ms G] ...
 *       the robot's end alone, for a policy's end elsewhere (pipelines/sim-policy.txt): the
 *       cameras and the state (with the task) as RTP to H, ports P to P+6; the actions on A:N;
 *       real time (pi0simremote.h)
 *
 * Exit status: 2 for bad arguments (usage, an option the command does not take, a value out of
 * range, options that contradict each other, a named file that cannot be read), before anything
 * runs; 1 for a run that failed.
 */
#include "common/pi0json.h"
#include "gst/gstpi0elements.h"
#include "tools/common/pi0keyfile.h"
#include "tools/pi0-sim/pi0simloop.h"
#include "tools/pi0-sim/pi0simremote.h"
#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"

#include <gst/gst.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace
{

namespace tsim = pi0::tools::sim;
using Json = pi0::json::OrderedValue;

/* The command, snapshot's own options, and the loop's (which expert and snapshot read too). */
struct Args {
  std::string command, out;
  unsigned ticks = 0, timeout = 120, delay_ms = 0;
  /* robot: the robot's end across a network */
  std::string policy_host = "127.0.0.1", bind = "0.0.0.0";
  int rtp_port = 5600, port = 9870;
  unsigned gap_ms = 500;
  std::string key;  /* robot: HMAC key, empty for none */
  std::string rows; /* run, robot: where each episode's executed rows go, or "" */
  tsim::LoopOptions loop = [] {
    tsim::LoopOptions o;
    o.episodes = 10;
    return o;
  }();
};

constexpr const char *kUsage =
    "usage: pi0-sim snapshot --out DIR [--seed S] [--ticks N] [--width W] [--height H]"
    " [--blocks N] [--block-size M] [--robot-config F]\n"
    "       pi0-sim expert [--episodes K] [--seed S] [--execute N] [--horizon H] "
    "[--actuation-noise RAD] [--blocks N] [--block-size M] [--robot-config F]\n"
    "       pi0-sim run [--policy expert|MODEL] [--infer PROPS] [--episodes K] [--seed S]"
    " [--execute N] [--horizon H] [--width W] [--height H] [--prep-size P]"
    " [--delay-ms D] [--record DIR [--lossless]] [--overlay DIR] [--rows FILE]"
    " [--actuation-noise RAD] [--blocks N] [--block-size M] [--real-time] [--sync]"
    " [--robot-config F] [--timeout S]\n"
    "       pi0-sim robot [--policy-host H] [--rtp-port P] [--bind A] [--port N]"
    " [--episodes K] [--seed S] [--execute N] [--width W] [--height H] [--gap-ms G]"
    " [--key K | --key-file F] [--rows FILE] [--actuation-noise RAD] [--blocks N]"
    " [--block-size M] [--robot-config F] [--timeout S]\n"
    "       (pi0-sim --help: every option)\n";

/* The exit status of a bad argument (docs/sim.md); 1 is a run that failed. */
constexpr int kBadArguments = 2;

int
usage ()
{
  std::fputs (kUsage, stderr);
  return kBadArguments;
}

/* A bad argument: the message, then the exit status for it. */
int
refuse (const std::string &why)
{
  std::fprintf (stderr, "pi0-sim: %s\n", why.c_str ());
  return kBadArguments;
}

bool
parse_uint (const char *s, unsigned long long max, unsigned long long *out)
{
  char *end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull (s, &end, 10);
  if (errno || !end || *end || s[0] == '-' || s[0] == '\0' || v > max)
    return false;
  *out = v;
  return true;
}

/* The commands, as a set an option belongs to. */
enum Command : unsigned { kSnapshot = 1, kExpert = 2, kRun = 4, kRobot = 8, kAll = 15 };

const std::map<std::string, Command> kCommands = {
    {"snapshot", kSnapshot}, {"expert", kExpert}, {"run", kRun}, {"robot", kRobot}};

/* One option: its GOption entry's texts, the commands that take it, and what it does with the
 * value ("" or why the value is refused, which the error prefixes with the option's name). A
 * flag (no value) is called with nullptr. */
struct Option {
  const char *name, *arg, *help;
  unsigned commands;
  std::function<std::string (const char *)> set;
};

/* What the options' callback fills: the table, and the options the command line gave. */
struct Parsed {
  std::vector<Option> options;
  std::vector<std::string> given;
};

std::function<std::string (const char *)>
whole (unsigned long long lo, unsigned long long hi, std::function<void (unsigned long long)> store)
{
  return [lo, hi, store] (const char *v) -> std::string {
    unsigned long long n = 0;
    if (!parse_uint (v, hi, &n) || n < lo)
      return (lo == 0 ? "not a whole number up to " + std::to_string (hi)
                      : "not a whole number from " + std::to_string (lo) + " to " +
                            std::to_string (hi)) +
             ": " + v;
    store (n);
    return "";
  };
}

std::function<std::string (const char *)>
real (double lo, double hi, const char *what, std::function<void (double)> store)
{
  return [=] (const char *v) -> std::string {
    char *end = nullptr;
    const double r = std::strtod (v, &end);
    if (!end || *end || end == v || !(r >= lo && r <= hi))
      return std::string (what) + ": " + v;
    store (r);
    return "";
  };
}

/* A path or a name: an empty one would quietly mean "none" or "here". */
std::function<std::string (const char *)>
text (std::string *out)
{
  return [out] (const char *v) -> std::string {
    if (!*v)
      return "empty: give one";
    *out = v;
    return "";
  };
}

std::function<std::string (const char *)>
flag (bool *out)
{
  return [out] (const char *) -> std::string {
    *out = true;
    return "";
  };
}

gboolean
on_option (const gchar *name, const gchar *value, gpointer data, GError **error)
{
  auto *parsed = static_cast<Parsed *> (data);
  for (const Option &o : parsed->options)
    if (std::string ("--") + o.name == name) {
      parsed->given.push_back (o.name);
      const std::string why = o.set (value);
      if (why.empty ())
        return TRUE;
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s: %s", name, why.c_str ());
      return FALSE;
    }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION, "unknown option %s", name);
  return FALSE;
}

/* The command line through GOptionContext, then what no command may be given: 0 when it is
 * good, else the exit status (2, the error or the usage printed; 0 for --help, which prints
 * every option). What needs the robot configuration is checked in main(). */
int
parse (int argc, char **argv, Args *a)
{
  pi0::sim::SceneOptions &scene = a->loop.scene;
  constexpr unsigned long long kCam0 = pi0::sim::kMinCameraSize, kCam1 = pi0::sim::kMaxCameraSize;
  bool lossless = false, real_time = false;
  Parsed p;
  p.options = {
      {"out", "DIR", "snapshot: where the three cameras' PNGs go", kSnapshot, text (&a->out)},
      {"seed", "S", "the first episode's scene (episode e is S + e; default 0)", kAll,
       whole (0, ~0ull, [a] (auto n) { a->loop.seed = n; })},
      {"ticks", "N", "snapshot: ticks the expert moves before the pictures (default 0)", kSnapshot,
       whole (0, 100000, [a] (auto n) { a->ticks = (unsigned)n; })},
      {"episodes", "K", "episodes to run, 1 to 1000000 (default 10)", kExpert | kRun | kRobot,
       whole (1, 1000000, [a] (auto n) { a->loop.episodes = (unsigned)n; })},
      {"execute", "N",
       "rows of each chunk executed before the next observation, 1 to 50 (default 5)",
       kExpert | kRun | kRobot, whole (1, 50, [a] (auto n) { a->loop.execute = (unsigned)n; })},
      {"horizon", "H", "the expert's chunk length, 1 to 50 (default 10)", kExpert | kRun,
       whole (1, 50, [a] (auto n) { a->loop.horizon = (unsigned)n; })},
      {"width", "W",
       "the cameras' width in pixels, 16 to 4096 (robot: a multiple of 8 up to 2040; default 224)",
       kSnapshot | kRun | kRobot,
       whole (kCam0, kCam1, [a] (auto n) { a->loop.camera_width = (int)n; })},
      {"height", "H",
       "the cameras' height in pixels, 16 to 4096 (robot: a multiple of 8 up to 2040; default 224)",
       kSnapshot | kRun | kRobot,
       whole (kCam0, kCam1, [a] (auto n) { a->loop.camera_height = (int)n; })},
      {"prep-size", "P", "run: cudaprep's output size, the model's image size (default 224)", kRun,
       whole (1, 4096, [a] (auto n) { a->loop.prep_size = (int)n; })},
      {"policy", "expert|MODEL", "run: the scripted expert, or pi0infer's model (default expert)",
       kRun, text (&a->loop.policy)},
      {"infer", "PROPS", "run: more pi0infer properties (\"rtc=off num-steps=10\")", kRun,
       [a] (const char *v) -> std::string {
         a->loop.infer_properties = v;
         return "";
       }},
      {"delay-ms", "D", "run: world time from capture to the chunk at the robot (default 0)", kRun,
       whole (0, 60000, [a] (auto n) { a->delay_ms = (unsigned)n; })},
      {"record", "DIR", "run: append each episode to this LeRobotDataset", kRun,
       text (&a->loop.record)},
      {"lossless", nullptr, "run --record: the cameras bit-exact", kRun, flag (&lossless)},
      {"overlay", "DIR", "run: the main camera with the planned path, one PNG per observation",
       kRun, text (&a->loop.overlay)},
      {"rows", "FILE",
       "run, robot: each episode's executed rows (the joint command of every tick) as a JSON line",
       kRun | kRobot, text (&a->rows)},
      {"real-time", nullptr, "run: on the clock, the cameras live, nothing waiting for the policy",
       kRun, flag (&real_time)},
      {"actuation-noise", "RAD", "noise on every joint command, radians (default 0)",
       kExpert | kRun | kRobot,
       real (0, 0.5, "radians from 0 to 0.5", [&scene] (double r) { scene.actuation_noise = r; })},
      {"blocks", "N", "blocks on the table, 1 to 5 (default 3)", kAll,
       whole (1, 5, [&scene] (auto n) { scene.blocks = (unsigned)n; })},
      {"block-size", "M", "the blocks' side in metres, 0.02 to 0.15 (default 0.10)", kAll,
       real (0.02, 0.15, "metres from 0.02 to 0.15",
             [&scene] (double m) {
               // Touching stays "the tip over the block": the same share of its side as the
               // default's.
               scene.touch_radius =
                   m * pi0::sim::SceneOptions{}.touch_radius / pi0::sim::SceneOptions{}.block_size;
               scene.block_size = m;
             })},
      {"block-speed", "V",
       "the moving task: the blocks turn about the base at V m/s at 0.5 m, 0 to 0.5 (default 0, "
       "static)",
       kAll, real (0, 0.5, "m/s from 0 to 0.5", [&scene] (double v) { scene.block_speed = v; })},
      {"block-speed-spread", "F", "each scene's speed uniform in V x (1 +- F), 0 to 1 (default 0)",
       kAll,
       real (0, 1, "a fraction from 0 to 1",
             [&scene] (double f) { scene.block_speed_spread = f; })},
      {"phrasing", "canonical|train|heldout",
       "how the instruction is worded: \"touch the red block\" always, a training template or a "
       "held-out one, with case and punctuation varied (default canonical)",
       kAll,
       [&scene] (const char *v) -> std::string {
         if (!pi0::sim::parse_phrasing (v, &scene.phrasing))
           return std::string ("canonical, train or heldout, not \"") + v + "\"";
         return "";
       }},
      {"time-limit", "N", "control ticks an episode may take, 1 to 100000 (default 60: 6 s)", kAll,
       whole (1, 100000, [&scene] (auto n) { scene.time_limit = (unsigned)n; })},
      {"sync", nullptr,
       "run: the synchronous baseline: the robot holds still for the delay before each chunk "
       "(but the first), then runs it from its first row",
       kRun, flag (&a->loop.sync)},
      {"robot-config", "F", "the arm (default pipelines/robot-planar.json)", kAll,
       text (&a->loop.robot_config)},
      {"timeout", "S", "real seconds to wait for one chunk, 1 to 3600 (default 120)", kRun | kRobot,
       whole (1, 3600, [a] (auto n) { a->timeout = (unsigned)n; })},
      {"policy-host", "H", "robot: where the cameras and the state go (default 127.0.0.1)", kRobot,
       text (&a->policy_host)},
      {"rtp-port", "P", "robot: the main camera's RTP port; the others P+2 to P+6 (default 5600)",
       kRobot, whole (1, 65529, [a] (auto n) { a->rtp_port = (int)n; })},
      {"bind", "A", "robot: the address of its action port (default 0.0.0.0)", kRobot,
       text (&a->bind)},
      {"port", "N", "robot: its action port (default 9870)", kRobot,
       whole (1, 65535, [a] (auto n) { a->port = (int)n; })},
      {"gap-ms", "G", "robot: quiet time between episodes (default 500)", kRobot,
       whole (0, 60000, [a] (auto n) { a->gap_ms = (unsigned)n; })},
      {"key", "K",
       "robot: HMAC key shared with pi0actionsink's key: action frames must carry a valid "
       "HMAC-SHA256 (others are dropped), and the feedback is signed with it",
       kRobot,
       [a] (const char *v) -> std::string {
         if (!*v)
           return "empty: an empty key would turn authentication off (omit --key to run "
                  "without it)";
         a->key = v;
         return "";
       }},
      {"key-file", "F", "robot: read the HMAC key from a file (its whole content)", kRobot,
       [a] (const char *v) {
         return pi0::tools::read_hmac_key_file (v, &a->key);
       }},
  };
  std::vector<GOptionEntry> entries;
  for (const Option &o : p.options)
    entries.push_back ({o.name, 0, o.arg ? 0 : G_OPTION_FLAG_NO_ARG, G_OPTION_ARG_CALLBACK,
                        (gpointer)on_option, o.help, o.arg});
  entries.push_back ({nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr});

  GOptionContext *ctx = g_option_context_new ("snapshot|expert|run|robot");
  GOptionGroup *group =
      g_option_group_new ("pi0-sim", "pi0-sim's options", "pi0-sim's options", &p, nullptr);
  g_option_group_add_entries (group, entries.data ());
  g_option_context_set_main_group (ctx, group);
  g_option_context_set_summary (
      ctx, "The closed loop's simulated world (docs/sim.md):\n"
           "  snapshot  the three cameras' views of a scene as PNGs, the scene as JSON\n"
           "  expert    episodes solved by the scripted expert\n"
           "  run       the same episodes through the chain (pi0viewmux, the policy, the robot)\n"
           "  robot     the robot's end alone, for a policy's end elsewhere\n"
           "Bad arguments exit with status 2, a run that fails with 1.");
  GError *err = nullptr;
  const gboolean ok = g_option_context_parse (ctx, &argc, &argv, &err);
  g_option_context_free (ctx);
  if (!ok) {
    const std::string why = err->message;
    g_error_free (err);
    return refuse (why);
  }
  a->loop.lossless = lossless;
  a->loop.real_time = real_time;
  if (argc != 2)
    return usage ();
  a->command = argv[1];
  const auto command = kCommands.find (a->command);
  if (command == kCommands.end ())
    return usage ();
  /* An option the command does not take would be ignored without a word. */
  for (const std::string &name : p.given)
    for (const Option &o : p.options)
      if (name == o.name && !(o.commands & command->second))
        return refuse ("--" + name + " is not an option of " + a->command + " (pi0-sim --help)");
  auto given = [&p] (const char *name) {
    return std::find (p.given.begin (), p.given.end (), name) != p.given.end ();
  };
  if (a->command == "snapshot" && a->out.empty ())
    return refuse ("snapshot needs --out DIR");
  if (a->command == "robot" && (!tsim::remote_camera_size_ok (a->loop.camera_width) ||
                                !tsim::remote_camera_size_ok (a->loop.camera_height)))
    return refuse ("robot: --width and --height must be multiples of 8 up to 2040 (RTP/JPEG "
                   "carries a frame's size in 8-pixel blocks)");
  if (given ("key") && given ("key-file"))
    return refuse ("--key and --key-file are one key: give one of them");
  if (lossless && a->loop.record.empty ())
    return refuse ("--lossless is how --record records the cameras: it needs --record DIR");
  return 0;
}

/* @v rounded to @decimals places, as the lines print it. */
double
rounded (double v, int decimals)
{
  const double scale = std::pow (10.0, decimals);
  return std::round (v * scale) / scale;
}

void
print_line (const Json &j)
{
  std::printf ("%s\n", j.dump ().c_str ());
  std::fflush (stdout);
}

/* Prints each episode's line as it ends, and the summary line of all of them. */
struct Summary {
  bool remote = false; /* `robot`: the policy is across the wire */
  unsigned counts[4] = {0, 0, 0, 0}, success_ticks = 0, switches = 0;
  double jerk = 0, switch_sum = 0, switch_max = 0;

  void add (const tsim::EpisodeResult &r)
  {
    counts[(int)r.outcome]++;
    if (r.outcome == pi0::sim::Outcome::Success)
      success_ticks += r.ticks;
    jerk += r.jerk;
    switches += r.switches;
    switch_sum += r.switch_step_sum;
    switch_max = std::max (switch_max, r.switch_step_max);
    Json j = {{"seed", r.seed},
              {"instruction", r.instruction},
              {"outcome", pi0::sim::outcome_name (r.outcome)},
              {"ticks", r.ticks},
              {"chunks", r.chunks}};
    /* What pi0infer did is known in-process only: `robot` sees the policy through the wire. */
    if (!remote) {
      j["guided"] = r.guided;
      j["delay_rows"] = r.delay_rows;
      j["unanswered"] = r.unanswered;
    }
    j["rows"] = r.executed;
    j["rejected"] = r.rejected;
    j["jerk"] = rounded (r.jerk, 3);
    j["switches"] = r.switches;
    j["switch_step_max"] = rounded (r.switch_step_max, 5);
    j["step_max"] = rounded (r.step_max, 5);
    j["late"] = r.late;
    print_line (j);
  }
  void print (unsigned episodes) const
  {
    const unsigned success = counts[(int)pi0::sim::Outcome::Success];
    print_line (
        {{"episodes", episodes},
         {"success", success},
         {"wrong", counts[(int)pi0::sim::Outcome::Wrong]},
         {"timeout", counts[(int)pi0::sim::Outcome::Timeout]},
         {"mean_ticks_to_success", rounded (success ? (double)success_ticks / success : 0.0, 2)},
         {"mean_jerk", rounded (episodes ? jerk / episodes : 0.0, 3)},
         {"switches", switches},
         {"mean_switch_step", rounded (switches ? switch_sum / switches : 0.0, 5)},
         {"max_switch_step", rounded (switch_max, 5)}});
  }
};

/* --rows FILE: one JSON line per episode, {"seed": S, "ticks": [...]}, each tick the row the
 * robot had under way and the command the arm was given (null when it held). Floats are written
 * so that they read back to the same float. */
struct RowsFile {
  std::FILE *f = nullptr;
  ~RowsFile ()
  {
    if (f)
      std::fclose (f);
  }
  bool open (const std::string &path, std::string *error)
  {
    f = std::fopen (path.c_str (), "w");
    if (!f)
      *error = "--rows: cannot write " + path + ": " + std::strerror (errno);
    return f != nullptr;
  }
  void add (const tsim::EpisodeResult &r)
  {
    if (!f)
      return;
    Json ticks = Json::array ();
    for (const tsim::TickRow &t : r.tick_rows) {
      Json command = nullptr;
      if (!t.command.empty ()) {
        command = Json::array ();
        for (float v : t.command)
          command.push_back (v);
      }
      ticks.push_back ({{"chunk", t.chunk}, {"row", t.row}, {"command", command}});
    }
    const std::string line = Json ({{"seed", r.seed}, {"ticks", ticks}}).dump () + "\n";
    std::fputs (line.c_str (), f);
    std::fflush (f);
  }
};

Json
scene_json (const pi0::sim::World &w)
{
  Json blocks = Json::array (), joints = Json::array ();
  for (const pi0::sim::Block &b : w.blocks ())
    blocks.push_back ({{"colour", b.colour},
                       {"x", rounded (b.at.x, 4)},
                       {"y", rounded (b.at.y, 4)},
                       {"yaw", rounded (b.yaw, 4)}});
  for (float q : w.joints ())
    joints.push_back (rounded (q, 4));
  Json scene = {{"seed", w.seed ()},
                {"instruction", w.instruction ()},
                {"target", w.target ()},
                {"blocks", blocks},
                {"joints", joints}};
  if (w.table_turn () != 0) // the moving task: the table's turn now, rad per tick (+: leftwards)
    scene["table_turn"] = rounded (w.table_turn (), 5);
  return scene;
}

/* GStreamer (its options are not pi0-sim's: GST_DEBUG and the like) and the project's elements,
 * for the commands that run a pipeline. */
bool
start_gstreamer ()
{
  gst_init (nullptr, nullptr);
  if (gst_pi0_elements_register (nullptr))
    return true;
  std::fprintf (stderr, "pi0-sim: could not register the gst-pi0 elements\n");
  return false;
}

} // namespace

int
main (int argc, char **argv)
{
  Args a;
  if (const int status = parse (argc, argv, &a))
    return status;
  tsim::LoopOptions &o = a.loop;
  o.timeout_s = a.timeout;
  o.delay_ns = (uint64_t)a.delay_ms * 1000000;
  std::string err;
  /* expert plays the run's loop without the chain: the same rules (its defaults pass the rest). */
  if ((a.command == "run" || a.command == "expert") && !tsim::check_options (o, &err))
    return refuse (err);
  if (o.robot_config.empty ()) {
    const char *root = std::getenv ("PI0_SOURCE_ROOT");
    o.robot_config = std::string (root ? root : ".") + "/pipelines/robot-planar.json";
  }
  /* A file the command line names, read before anything runs (as --key-file's). */
  pi0::proto::RobotConfig robot;
  if (!pi0::proto::load_robot_config (o.robot_config, &robot, &err))
    return refuse ("--robot-config: " + err);
  RowsFile rows;
  if (!a.rows.empty () && !rows.open (a.rows, &err)) {
    std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
    return 1;
  }
  try {
    if (a.command == "snapshot") {
      pi0::sim::World w (robot, o.seed, o.scene);
      while (w.ticks () < a.ticks)
        for (const std::vector<float> &row : pi0::sim::expert_chunk (w, 1))
          w.step (row.data ());
      for (pi0::sim::Camera c :
           {pi0::sim::Camera::Overhead, pi0::sim::Camera::Front, pi0::sim::Camera::Wrist}) {
        const std::string path = a.out + "/" + pi0::sim::camera_name (c) + ".png";
        if (!pi0::sim::write_png (w, c, o.camera_width, o.camera_height, path, &err)) {
          std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
          return 1;
        }
      }
      print_line (scene_json (w));
      return 0;
    }
    if (a.command == "run") {
      if (!start_gstreamer ())
        return 1;
      Summary sum;
      const bool ok = tsim::run_loop (
          o,
          [&] (const tsim::EpisodeResult &r) {
            sum.add (r);
            rows.add (r);
          },
          &err);
      if (!ok) {
        std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
        return 1;
      }
      sum.print (o.episodes);
      return 0;
    }
    if (a.command == "robot") {
      if (!start_gstreamer ())
        return 1;
      tsim::RemoteOptions r;
      r.loop = o;
      r.policy_host = a.policy_host;
      r.bind = a.bind;
      r.rtp_port = a.rtp_port;
      r.port = a.port;
      r.gap_s = a.gap_ms / 1000.0;
      r.key = a.key;
      Summary sum;
      sum.remote = true;
      if (!tsim::run_remote_robot (
              r,
              [&] (const tsim::EpisodeResult &e) {
                sum.add (e);
                rows.add (e);
              },
              &err)) {
        std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
        return 1;
      }
      sum.print (o.episodes);
      return 0;
    }
    if (a.command == "expert") {
      unsigned success = 0;
      for (unsigned e = 0; e < o.episodes; e++) {
        pi0::sim::World w (robot, o.seed + e, o.scene);
        while (!w.done ()) {
          const auto chunk = pi0::sim::expert_chunk (w, o.horizon);
          for (unsigned k = 0; k < o.execute && k < chunk.size () && !w.done (); k++)
            w.step (chunk[k].data ());
        }
        success += w.outcome () == pi0::sim::Outcome::Success;
        print_line ({{"seed", w.seed ()},
                     {"instruction", w.instruction ()},
                     {"outcome", pi0::sim::outcome_name (w.outcome ())},
                     {"ticks", w.decided_at ()}});
      }
      print_line ({{"episodes", o.episodes}, {"success", success}});
      return 0;
    }
  } catch (const std::exception &e) {
    std::fprintf (stderr, "pi0-sim: %s\n", e.what ());
    return 1;
  }
  return usage ();
}
