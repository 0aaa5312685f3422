/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* vs-peers-chain: our side of bench/vs-peers, one observation at a time on command.
 *
 * The chain as an application runs it: three appsrc cameras at their native sizes (RGB, as a
 * camera or decoder hands them over) and a state appsrc -> pi0viewmux -> cudaprep -> pi0infer
 * -> appsink. bench/vs_peers.py starts it with the observation directory that it also gives
 * LeRobot and openpi (manifest.json, raw frames, states) and then writes "run I" lines on
 * stdin; for each it pushes observation I, waits for its action chunk and prints one JSON line:
 * the whole observation -> actions wall time and process CPU time, the model's own pass (the
 * action meta's model_time), what the metas' stamps say of each stage, and the actions. The
 * flow-matching noise of observation I is drawn from noise-seed + I (pi0infer's seed is moved
 * before each push so that its "seed + sequence" lands there), which is what the peers' workers
 * draw too. "quit" (or end of input) stops it. Nothing is asserted here: the driver compares.
 *
 * Where the peers cannot run (the GPU check's machine has no network and no room for LeRobot's
 * or openpi's Python environments, docs/gpu.md), it stands alone: --make-obs writes an
 * observation directory of the driver's layout (its own frames: the same sizes, structure and
 * noise; states of 0.7 σ around 0), and --summary runs every observation of --obs once and
 * prints the driver's figures (median and 95th percentile) instead of answering commands.
 *
 *   vs-peers-chain --obs DIR --checkpoint DIR --tokenizer FILE [--device cpu|cuda]
 *                  [--precision fp32|bf16] [--filter antialias|bilinear|pil] [--size N]
 *                  [--warmup N] [--summary]
 *   vs-peers-chain --make-obs DIR [--count N] [--state-dim N] */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "bench/pi0benchutil.h"
#include "common/pi0json.h"
#include "gst/pi0/pi0.h"
#include "tools/common/pi0gsttools.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using json = pi0::json::Value;
using pi0::tools::BufferPtr;
using pi0::tools::ElementPtr;
using pi0::tools::ObjectPtr;

namespace
{

struct Camera {
  std::string name;
  int width = 0, height = 0;
};

struct Manifest {
  std::string dir, prompt;
  std::vector<Camera> cameras;
  int state_dim = 0, count = 0;
  guint64 noise_seed = 0;
};

/* @path, which must hold exactly @size bytes, as a buffer of its own. */
BufferPtr
read_buffer (const std::string &path, size_t size, std::string *error)
{
  std::ifstream f (path, std::ios::binary);
  if (!f) {
    *error = "cannot open " + path;
    return nullptr;
  }
  BufferPtr b (gst_buffer_new_allocate (nullptr, size, nullptr));
  GstMapInfo map;
  gst_buffer_map (b.get (), &map, GST_MAP_WRITE);
  f.read ((char *)map.data, (std::streamsize)size);
  const bool whole = (size_t)f.gcount () == size && f.peek () == EOF;
  gst_buffer_unmap (b.get (), &map);
  if (!whole) {
    *error = path + " does not hold " + std::to_string (size) + " bytes";
    return nullptr;
  }
  return b;
}

/* Minor and major page faults of the process so far: a worker that sat idle while the peers
 * ran may find its pages reclaimed (docs/perf.md, "Against LeRobot and openpi"). */
long
faults ()
{
  struct rusage ru;
  getrusage (RUSAGE_SELF, &ru);
  return ru.ru_minflt + ru.ru_majflt;
}

double
cpu_ms ()
{
  struct rusage ru;
  getrusage (RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

double
ns_ms (GstClockTime a, GstClockTime b)
{
  if (!GST_CLOCK_TIME_IS_VALID (a) || !GST_CLOCK_TIME_IS_VALID (b))
    return -1;
  return ((double)a - (double)b) / 1e6;
}

class Worker
{
public:
  bool start (const Manifest &m, const std::string &checkpoint, const std::string &tokenizer,
              const std::string &device, const std::string &precision, const std::string &filter,
              int size, std::string *error)
  {
    m_ = m;
    std::ostringstream line;
    const char *pads[] = {"main", "side", "top"};
    for (size_t v = 0; v < m.cameras.size () && v < 3; v++)
      line << "appsrc name=cam" << v
           << " format=time caps=video/x-raw,format=RGB,width=" << m.cameras[v].width
           << ",height=" << m.cameras[v].height << ",framerate=30/1,pixel-aspect-ratio=1/1 ! mux."
           << pads[v] << " ";
    const bool cuda = device == "cuda";
    line << "appsrc name=state format=time caps=application/x-pi0-state,dim=" << m.state_dim
         << " ! mux.state pi0viewmux name=mux ! cudaprep device=" << device << " filter=" << filter
         << " width=" << size << " height=" << size
         << (cuda && precision == "bf16" ? " dtype=bfloat16" : "")
         << " ! pi0infer name=infer model=\"" << checkpoint << "\" tokenizer=\"" << tokenizer
         << "\" device=" << device << " precision=" << precision
         << " ! appsink name=out sync=false max-buffers=4";
    pipeline_ = pi0::tools::launch (line.str (), error);
    if (!pipeline_)
      return false;
    GstBin *bin = GST_BIN (pipeline_.get ());
    for (size_t v = 0; v < m.cameras.size (); v++)
      cams_.emplace_back (gst_bin_get_by_name (bin, ("cam" + std::to_string (v)).c_str ()));
    state_.reset (gst_bin_get_by_name (bin, "state"));
    infer_.reset (gst_bin_get_by_name (bin, "infer"));
    sink_.reset (gst_bin_get_by_name (bin, "out"));
    g_object_set (infer_.get (), "instruction", m.prompt.c_str (), nullptr);
    if (gst_element_set_state (pipeline_.get (), GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE ||
        pi0::tools::pop_error (pipeline_.get (), error)) {
      if (error->empty ())
        *error = "the pipeline did not start";
      return false;
    }
    return true;
  }

  /* Observation @index through the chain; its result as one JSON object. */
  bool run (int index, json *out, std::string *error)
  {
    /* Untimed: the frames and the state in buffers of their own, stamped, as a camera and the
     * robot's state source would hand them over. */
    const GstClockTime pts = sequence_ * (GST_SECOND / 30), dur = GST_SECOND / 30;
    auto load = [&] (const std::string &name, size_t size) {
      BufferPtr b =
          read_buffer (m_.dir + "/obs" + std::to_string (index) + "_" + name, size, error);
      if (b) {
        GST_BUFFER_PTS (b.get ()) = pts;
        GST_BUFFER_DURATION (b.get ()) = dur;
      }
      return b;
    };
    std::vector<BufferPtr> frames;
    for (const Camera &c : m_.cameras) {
      frames.push_back (load (c.name + ".rgb", (size_t)c.width * c.height * 3));
      if (!frames.back ())
        return false;
    }
    BufferPtr state = load ("state.f32", (size_t)m_.state_dim * 4);
    if (!state)
      return false;
    /* pi0infer draws observation N's noise from seed + N: N is this run's sequence. */
    g_object_set (infer_.get (), "seed", (guint64)(m_.noise_seed + index - sequence_), nullptr);

    const double c0 = cpu_ms ();
    const long f0 = faults ();
    const auto t0 = std::chrono::steady_clock::now ();
    const GstClockTime rt0 = gst_element_get_current_running_time (pipeline_.get ());
    for (size_t v = 0; v < frames.size (); v++)
      gst_app_src_push_buffer (GST_APP_SRC (cams_[v].get ()), frames[v].release ());
    gst_app_src_push_buffer (GST_APP_SRC (state_.get ()), state.release ());
    /* Waits in slices so that an element's error (wrong sizes, a bad checkpoint) ends the run
     * at once rather than after the 600 s a CPU forward pass may at most take. */
    GstSample *sample = nullptr;
    for (int slice = 0; !sample && slice < 6000; slice++) {
      sample = gst_app_sink_try_pull_sample (GST_APP_SINK (sink_.get ()), GST_SECOND / 10);
      if (!sample && pi0::tools::pop_error (pipeline_.get (), error))
        break;
    }
    const auto t1 = std::chrono::steady_clock::now ();
    const double c1 = cpu_ms ();
    const long f1 = faults ();
    sequence_++;
    if (!sample) {
      if (error->empty ())
        *error = "no action chunk within 600 s";
      return false;
    }
    GstBuffer *buf = gst_sample_get_buffer (sample);
    const GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (buf);
    const GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (buf);
    const GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf);
    if (!am || !om || !tm) {
      gst_sample_unref (sample);
      *error = "the output buffer lacks a pi0 meta";
      return false;
    }
    const double whole = std::chrono::duration<double, std::milli> (t1 - t0).count ();
    const double model = GST_CLOCK_TIME_IS_VALID (am->model_time) ? am->model_time / 1e6 : -1;
    json actions = json::array ();
    for (guint r = 0; r < am->horizon; r++) {
      json row = json::array ();
      for (guint c = 0; c < am->dim; c++)
        row.push_back (am->actions[r * am->dim + c]);
      actions.push_back (row);
    }
    *out = {{"i", index},
            {"whole_ms", whole},
            {"cpu_ms", c1 - c0},
            {"faults", f1 - f0},
            {"forward_ms", model},
            {"outside_ms", model >= 0 ? whole - model : -1},
            {"parts",
             {{"push_to_muxed", ns_ms (om->muxed_time, rt0)},
              {"cudaprep", ns_ms (tm->prepared_time, om->muxed_time)},
              {"pi0infer_around_model", am->inference_time / 1e6 - model},
              {"to_appsink", whole - ns_ms (am->done_time, rt0)}}},
            {"actions", actions}};
    gst_sample_unref (sample);
    return true;
  }

private:
  Manifest m_;
  ElementPtr pipeline_;
  std::vector<ObjectPtr<GstElement>> cams_;
  ObjectPtr<GstElement> state_, infer_, sink_;
  guint64 sequence_ = 0;
};

bool
read_manifest (const std::string &dir, Manifest *m, std::string *error)
{
  std::ifstream f (dir + "/manifest.json");
  if (!f) {
    *error = "no " + dir + "/manifest.json";
    return false;
  }
  std::stringstream text;
  text << f.rdbuf ();
  auto parsed = pi0::json::parse_strict (text.str (), dir + "/manifest.json", error);
  if (!parsed)
    return false;
  try {
    const json &j = *parsed;
    m->dir = dir;
    m->prompt = j.at ("prompt").get<std::string> ();
    m->state_dim = j.at ("state_dim").get<int> ();
    m->count = j.at ("count").get<int> ();
    m->noise_seed = j.at ("noise_seed").get<guint64> ();
    for (const auto &c : j.at ("cameras"))
      m->cameras.push_back ({c.at ("name").get<std::string> (), c.at ("width").get<int> (),
                             c.at ("height").get<int> ()});
  } catch (const std::exception &e) {
    *error = dir + "/manifest.json: " + e.what ();
    return false;
  }
  if (m->cameras.empty () || m->cameras.size () > 3 || m->state_dim < 1) {
    *error = dir + "/manifest.json: 1 to 3 cameras and a state are needed";
    return false;
  }
  return true;
}

/* The driver's observation layout (bench/vs_peers.py, make_observations) with frames of our
 * own: three camera sizes, sines in each channel plus noise, states ~ N(0, 0.7²). */
bool
make_observations (const std::string &dir, int count, int state_dim, std::string *error)
{
  if (g_mkdir_with_parents (dir.c_str (), 0755) != 0) {
    *error = "cannot make " + dir;
    return false;
  }
  const Camera cams[] = {
      {"cam_high", 1920, 1080}, {"cam_left_wrist", 1280, 720}, {"cam_right_wrist", 640, 480}};
  std::mt19937 rng (77);
  std::normal_distribution<float> noise (0.f, 12.f), unit (0.f, 1.f);
  std::uniform_real_distribution<float> phase (0.f, 6.28f);
  json manifest = {
      {"count", count},         {"prompt", "pick up the red block and put it in the bowl"},
      {"state_dim", state_dim}, {"horizon", 50},
      {"noise_seed", 1000003},  {"cameras", json::array ()}};
  for (const Camera &c : cams)
    manifest["cameras"].push_back ({{"name", c.name}, {"width", c.width}, {"height", c.height}});
  for (int i = 0; i < count; i++) {
    for (const Camera &c : cams) {
      std::vector<guint8> f ((size_t)c.width * c.height * 3);
      const float p0 = phase (rng), p1 = phase (rng), p2 = phase (rng);
      for (int y = 0; y < c.height; y++)
        for (int x = 0; x < c.width; x++) {
          const float v[3] = {127 + 100 * std::sin (x / (c.width / 7.f) + p0),
                              127 + 100 * std::sin (y / (c.height / 5.f) + p1),
                              127 + 100 * std::sin ((x + y) / (c.width / 3.f) + p2)};
          for (int k = 0; k < 3; k++)
            f[((size_t)y * c.width + x) * 3 + k] =
                (guint8)std::clamp (v[k] + noise (rng), 0.f, 255.f);
        }
      std::ofstream o (dir + "/obs" + std::to_string (i) + "_" + c.name + ".rgb", std::ios::binary);
      o.write ((const char *)f.data (), (std::streamsize)f.size ());
      if (!o) {
        *error = "cannot write in " + dir;
        return false;
      }
    }
    std::vector<float> st (state_dim);
    for (float &v : st)
      v = 0.7f * unit (rng);
    std::ofstream o (dir + "/obs" + std::to_string (i) + "_state.f32", std::ios::binary);
    o.write ((const char *)st.data (), (std::streamsize) (st.size () * 4));
  }
  std::ofstream o (dir + "/manifest.json");
  o << manifest.dump (1) << "\n";
  return (bool)o;
}

double
percentile (std::vector<double> v, double q)
{
  if (v.empty ())
    return NAN;
  std::sort (v.begin (), v.end ());
  const double pos = q / 100.0 * (double)(v.size () - 1);
  const size_t lo = (size_t)pos, hi = std::min (lo + 1, v.size () - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

/* The driver's table for our column alone. */
void
print_summary (const std::vector<json> &results)
{
  const char *figures[][2] = {{"outside_ms", "outside the model (ms)"},
                              {"forward_ms", "model forward (ms)"},
                              {"whole_ms", "whole observation -> actions (ms)"},
                              {"cpu_ms", "process CPU time (ms)"},
                              {"faults", "page faults (count)"}};
  std::printf ("| figure | gst-pi0 median | p95 |\n| --- | --- | --- |\n");
  for (const auto &f : figures) {
    std::vector<double> v;
    for (const json &r : results)
      v.push_back (r.at (f[0]).get<double> ());
    std::printf ("| %s | %.2f | %.2f |\n", f[1], percentile (v, 50), percentile (v, 95));
  }
  std::printf ("\n| part | median ms | p95 ms |\n| --- | --- | --- |\n");
  for (const auto &[name, _] : results.front ().at ("parts").items ()) {
    std::vector<double> v;
    for (const json &r : results)
      v.push_back (r.at ("parts").at (name).get<double> ());
    std::printf ("| %s | %.3f | %.3f |\n", name.c_str (), percentile (v, 50), percentile (v, 95));
  }
}

} // namespace

int
main (int argc, char **argv)
{
  gchar *obs = nullptr, *checkpoint = nullptr, *tokenizer = nullptr, *device = nullptr,
        *precision = nullptr, *filter = nullptr, *make_obs = nullptr;
  int warmup = 2, count = 20, state_dim = 14, size = 224;
  gboolean summary = FALSE;
  GOptionEntry entries[] = {
      {"obs", 0, 0, G_OPTION_ARG_FILENAME, &obs, "Observation directory (manifest.json)", "DIR"},
      {"checkpoint", 0, 0, G_OPTION_ARG_FILENAME, &checkpoint, "Checkpoint directory", "DIR"},
      {"tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer, "SentencePiece model", "FILE"},
      {"device", 0, 0, G_OPTION_ARG_STRING, &device, "cpu (default) or cuda", "D"},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &precision, "fp32 (default) or bf16", "P"},
      {"filter", 0, 0, G_OPTION_ARG_STRING, &filter, "cudaprep's filter (default antialias)", "F"},
      {"size", 0, 0, G_OPTION_ARG_INT, &size,
       "cudaprep's output side, the model's image size (224)", "N"},
      {"warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "Untimed runs of observation 0 first (2)", "N"},
      {"summary", 0, 0, G_OPTION_ARG_NONE, &summary,
       "Run every observation once and print the figures (no commands)", nullptr},
      {"make-obs", 0, 0, G_OPTION_ARG_FILENAME, &make_obs,
       "Write an observation directory and exit", "DIR"},
      {"count", 0, 0, G_OPTION_ARG_INT, &count, "Observations --make-obs writes (20)", "N"},
      {"state-dim", 0, 0, G_OPTION_ARG_INT, &state_dim, "State values --make-obs writes (14)", "N"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr}};
  const int init = pi0::bench::init (&argc, &argv, "- our chain, for bench/vs-peers", entries);
  if (init >= 0)
    return init;
  std::string error;
  if (make_obs) {
    if (count < 1 || state_dim < 1 || state_dim > 1024) {
      std::fprintf (stderr, "vs-peers-chain: --count must be >= 1, --state-dim 1..1024\n");
      return 2;
    }
    if (!make_observations (make_obs, count, state_dim, &error)) {
      std::fprintf (stderr, "vs-peers-chain: %s\n", error.c_str ());
      return 1;
    }
    return 0;
  }
  if (!obs || !checkpoint || !tokenizer) {
    std::fprintf (stderr, "vs-peers-chain: --obs, --checkpoint and --tokenizer are required\n");
    return 2;
  }
  if (size < 1 || size > 4096 || warmup < 0) {
    std::fprintf (stderr, "vs-peers-chain: --size must be 1..4096, --warmup >= 0\n");
    return 2;
  }
  Manifest m;
  if (!read_manifest (obs, &m, &error)) {
    std::fprintf (stderr, "vs-peers-chain: %s\n", error.c_str ());
    return 2;
  }
  Worker w;
  if (!w.start (m, checkpoint, tokenizer, device ? device : "cpu", precision ? precision : "fp32",
                filter ? filter : "antialias", size, &error)) {
    std::fprintf (stderr, "vs-peers-chain: %s\n", error.c_str ());
    return 1;
  }
  for (int i = 0; i < warmup; i++) {
    json r;
    if (!w.run (0, &r, &error)) {
      std::fprintf (stderr, "vs-peers-chain: warm-up: %s\n", error.c_str ());
      return 1;
    }
  }
  if (summary) {
    std::vector<json> results;
    for (int i = 0; i < m.count; i++) {
      json r;
      if (!w.run (i, &r, &error)) {
        std::fprintf (stderr, "vs-peers-chain: observation %d: %s\n", i, error.c_str ());
        return 1;
      }
      results.push_back (r);
    }
    std::printf ("vs-peers-chain: %s, %s, %s, %d observations after %d warm-up runs\n", checkpoint,
                 device ? device : "cpu", precision ? precision : "fp32", m.count, warmup);
    print_summary (results);
    return 0;
  }
  std::cout << json ({{"ready", true}}).dump () << std::endl;
  std::string cmd;
  while (std::getline (std::cin, cmd)) {
    if (cmd == "quit")
      break;
    int index = -1;
    if (std::sscanf (cmd.c_str (), "run %d", &index) != 1 || index < 0 || index >= m.count) {
      std::cout << json ({{"error", "bad command: " + cmd}}).dump () << std::endl;
      continue;
    }
    json r;
    if (!w.run (index, &r, &error)) {
      std::cout << json ({{"error", error}}).dump () << std::endl;
      return 1;
    }
    std::cout << r.dump () << std::endl;
  }
  return 0;
}
