/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the action path costs on the CPU: frame encode/decode, JSON, the safety gate and clamp,
 * and pi0actionsink's render (chunk mode, UDP to loopback) and control tick (stream mode, test
 * clock). Prints a table; never asserted. Usage: bench_pi0actionsink [iterations] */

#include "gst/gstpi0elements.h"
#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <glib/gstdio.h>
#include <string>
#include <vector>

namespace
{

double
time_ns (int iters, const std::function<void ()> &fn)
{
  fn (); /* warm-up */
  auto t0 = std::chrono::steady_clock::now ();
  for (int i = 0; i < iters; i++)
    fn ();
  auto t1 = std::chrono::steady_clock::now ();
  return std::chrono::duration<double, std::nano> (t1 - t0).count () / iters;
}

void
row (const char *what, double ns)
{
  printf ("| %-52s | %12.0f |\n", what, ns);
}

std::string
config (unsigned dim)
{
  std::string j = "{\"joints\":[", lo, hi, st;
  for (unsigned i = 0; i < dim; i++) {
    j += (i ? ",\"j" : "\"j") + std::to_string (i) + "\"";
    lo += i ? ",-1" : "-1";
    hi += i ? ",1" : "1";
    st += i ? ",0.01" : "0.01";
  }
  return j + "],\"lower\":[" + lo + "],\"upper\":[" + hi + "],\"max_step\":[" + st + "]}";
}

} // namespace

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  gst_pi0_elements_register (nullptr);
  const int iters = argc > 1 ? atoi (argv[1]) : 20000;

  const unsigned H = 50, D = 14;
  std::vector<float> v (H * D);
  for (size_t i = 0; i < v.size (); i++)
    v[i] = 0.5f * (float)((i * 7919) % 1000) / 1000.0f;
  pi0::proto::Header h;
  h.steps = (uint16_t)H;
  h.chunk_steps = H;
  h.dim = (uint16_t)D;
  std::vector<uint8_t> buf;
  std::vector<uint8_t> frame;
  pi0::proto::encode (h, v.data (), "", frame);
  std::vector<uint8_t> frame_mac;
  pi0::proto::encode (h, v.data (), "key", frame_mac);
  pi0::proto::Limits lim;
  pi0::proto::Frame out;
  pi0::proto::RobotConfig cfg;
  pi0::proto::parse_robot_config (config (D), &cfg, nullptr);
  std::vector<float> o (D);

  printf (
      "| %-52s | ns per op    |\n",
      ("operation (chunk " + std::to_string (H) + "x" + std::to_string (D) + " float32)").c_str ());
  printf ("|------------------------------------------------------|--------------|\n");
  row ("encode frame (2876 B)", time_ns (iters, [&] {
         buf.clear ();
         pi0::proto::encode (h, v.data (), "", buf);
       }));
  row ("encode frame + HMAC-SHA256", time_ns (iters, [&] {
         buf.clear ();
         pi0::proto::encode (h, v.data (), "key", buf);
       }));
  row ("decode frame (size, CRC, finite)",
       time_ns (iters, [&] { pi0::proto::decode (frame.data (), frame.size (), lim, "", &out); }));
  row ("decode frame + HMAC check", time_ns (iters, [&] {
         pi0::proto::decode (frame_mac.data (), frame_mac.size (), lim, "key", &out);
       }));
  row ("JSON line of the chunk",
       time_ns (iters / 10 + 1, [&] { (void)pi0::proto::to_json (h, v.data (), "m"); }));
  row ("safety gate: check_chunk (all finite)",
       time_ns (iters, [&] { pi0::proto::check_chunk (&cfg, v.data (), H, D); }));
  row ("clamp one action (limits + exact step window)", time_ns (iters * 10, [&] {
         pi0::proto::limit_action (cfg, v.data (), v.data () + D, o.data ());
       }));

  /* The element: chunk mode to a UDP port on loopback nobody reads (split into 3 datagrams). */
  {
    std::string desc =
        "pi0actionsink mode=chunk target=udp://127.0.0.1:9 robot-config=/tmp/pi0bench-robot.json";
    g_file_set_contents ("/tmp/pi0bench-robot.json", config (D).c_str (), -1, nullptr);
    GstElement *sink = gst_parse_launch (desc.c_str (), nullptr);
    gst_object_ref_sink (sink);
    GstHarness *hs = gst_harness_new_with_element (sink, "sink", nullptr);
    gst_harness_set_src_caps_str (hs, GST_PI0_OBSERVATION_MEDIA_TYPE);
    guint64 seq = 0;
    const int n = iters / 10 + 1;
    row ("pi0actionsink render, chunk mode, UDP (per chunk)", time_ns (n, [&] {
           GstBuffer *b = gst_buffer_new ();
           GstPi0ActionMeta *m = gst_buffer_add_pi0_action_meta (b, H, D, v.data (), "m");
           m->sequence = ++seq;
           m->observation_time = 0;
           gst_harness_push (hs, b);
         }));
    gst_harness_teardown (hs);
    gst_object_unref (sink);
  }
  /* Stream mode: one control tick (clock wake-up, row selection, clamp, encode, send). The
   * figure includes the harness's crank round trip between two threads. */
  {
    std::string desc =
        "pi0actionsink mode=stream target=udp://127.0.0.1:9 max-action-age=18446744073709551615 "
        "robot-config=/tmp/pi0bench-robot.json";
    GstElement *sink = gst_parse_launch (desc.c_str (), nullptr);
    gst_object_ref_sink (sink);
    GstHarness *hs = gst_harness_new_with_element (sink, "sink", nullptr);
    gst_harness_set_src_caps_str (hs, GST_PI0_OBSERVATION_MEDIA_TYPE);
    std::vector<float> big (4096 * D, 0.1f);
    GstBuffer *b = gst_buffer_new ();
    GstPi0ActionMeta *m = gst_buffer_add_pi0_action_meta (b, 4096, D, big.data (), "m");
    m->sequence = 1;
    m->observation_time = 0;
    gst_harness_push (hs, b);
    row ("pi0actionsink stream tick incl. test-clock crank", time_ns (2000, [&] {
           gst_harness_crank_single_clock_wait (hs);
           gst_harness_wait_for_clock_id_waits (hs, 1, 5);
         }));
    gst_harness_teardown (hs);
    gst_object_unref (sink);
  }
  g_unlink ("/tmp/pi0bench-robot.json");
  return 0;
}
