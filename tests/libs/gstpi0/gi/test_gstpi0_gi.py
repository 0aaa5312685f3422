# SPDX-License-Identifier: LGPL-2.1-or-later
"""libgstpi0-1.0 from Python through its typelib (GstPi0-1.0), as an application uses it.

Every value read through introspection is held against what the C API says about the very same
buffer (Pi0TestOracle-1.0, tests/libs/gstpi0/gi/pi0testoracle.c): a buffer made in C with every
field set, and the buffers of the real chain (pi0viewmux -> cudaprep -> pi0infer). Then the
typelib's struct layout against the C compiler's, every public symbol reachable (or skipped
with a named companion), lifetimes (what may outlive its buffer does, without a copy), no leak
over 10,000 buffers (the leaks tracer's live objects), and bad calls giving Python exceptions.

Run by `meson test -C build test_gstpi0_gi` with Debian's /usr/bin/python3 (python3-gi,
python3-gst-1.0, python3-numpy).
"""

import gc
import json
import math
import os
import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET

try:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstVideo", "1.0")
    gi.require_version("GIRepository", "2.0")
    gi.require_version("GstPi0", "1.0")
    gi.require_version("Pi0TestOracle", "1.0")
    from gi.repository import GIRepository, GLib, GObject, Gst, GstPi0, GstVideo, Pi0TestOracle
    import numpy as np
except (ImportError, ValueError) as e:  # ValueError: a typelib that is not found
    # Where Debian's python3-gi, python3-gst-1.0 or python3-numpy is missing the test skips (77);
    # in CI (PI0_CI=1) that is a failure.
    print(f"cannot load PyGObject, numpy or the typelibs: {e}", file=sys.stderr)
    sys.exit(1 if os.environ.get("PI0_CI") == "1" else 77)

Gst.init(None)

BUILD = os.environ.get("PI0_BUILD_ROOT", "build")
NONE = Gst.CLOCK_TIME_NONE

# The chain the tests and docs/examples run: three small cameras and a 7-dof state from an
# appsrc, not live, so it runs as fast as the CPU allows and gives the same chunks each time.
CHAIN = (
    "pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000 "
    "! cudaprep device=cpu width=32 height=32 "
    "! pi0infer model=builtin:pi0-tiny instruction=\"pick up the red cube\" action-dims=7 seed=3 "
    "! appsink name=out sync=false "
    "videotestsrc num-buffers=6 pattern=smpte ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! mux.main "
    "videotestsrc num-buffers=3 pattern=ball ! video/x-raw,format=NV12,width=32,height=24,framerate=15/1 ! mux.side "
    "videotestsrc num-buffers=2 pattern=snow ! video/x-raw,format=I420,width=80,height=60,framerate=10/1 ! mux.top "
    "appsrc name=state format=time caps=application/x-pi0-state,dim=(int)7 ! mux.state"
)


def run_chain():
    """The chain's output buffers, each with its observation, tensor and action metas."""
    pipeline = Gst.parse_launch(CHAIN)
    state = pipeline.get_by_name("state")
    sink = pipeline.get_by_name("out")
    pipeline.set_state(Gst.State.PLAYING)
    for i in range(31):  # 10 ms apart, past the last frame
        values = np.array([0.1 * i + j for j in range(7)], dtype=np.float32)
        buf = Gst.Buffer.new_wrapped(values.tobytes())
        buf.pts = i * 10 * Gst.MSECOND
        buf.duration = 10 * Gst.MSECOND
        assert state.emit("push-buffer", buf) == Gst.FlowReturn.OK
    state.emit("end-of-stream")
    out = []
    while True:
        sample = sink.emit("pull-sample")
        if sample is None:
            break
        out.append(sample.get_buffer())
    msg = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    assert msg is None, msg.parse_error()
    return out


def f32(values):
    """JSON floats (and "nan") from the oracle as float32, comparable bit for bit."""
    return np.array([float(v) for v in values], dtype=np.float32)


def same_floats(a, b):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def numpy_actions(buffer):
    """The chunk as a [horizon][dim] float32 array, read in place (docs/meta.md)."""
    meta = GstPi0.buffer_get_pi0_action_meta(buffer)
    values = GstPi0.buffer_get_pi0_actions(buffer)
    with values.map(Gst.MapFlags.READ) as info:
        chunk = np.frombuffer(info.data, dtype=np.float32).reshape(meta.horizon, meta.dim)
        return chunk.copy(), chunk.__array_interface__["data"][0]


def plane_sum(view_buffer, view):
    """Byte sum of each plane's rows of pixels, at the view's own offsets and strides."""
    info = view.info
    total = 0
    with view_buffer.map(Gst.MapFlags.READ) as m:
        data = np.frombuffer(m.data, dtype=np.uint8)
        finfo = info.finfo
        for p in range(finfo.n_planes):
            comp = list(finfo.plane[:finfo.n_components]).index(p)
            # GST_VIDEO_SUB_SCALE: a subsampled size rounds up.
            rows = -((-info.height) >> finfo.h_sub[comp])
            width = -((-info.width) >> finfo.w_sub[comp])
            row_bytes = width * finfo.pixel_stride[comp]
            plane = np.lib.stride_tricks.as_strided(
                data[info.offset[p]:], shape=(rows, row_bytes), strides=(info.stride[p], 1))
            total += int(plane.sum(dtype=np.uint64))
    return total


class Oracle:
    """What C says about a buffer: its metas (describe) and the structs' layout."""

    @staticmethod
    def describe(buffer):
        return json.loads(Pi0TestOracle.describe(buffer))

    @staticmethod
    def layout():
        return json.loads(Pi0TestOracle.layout())


class ReadThroughIntrospection:
    """Reads every meta of a buffer through GstPi0-1.0 alone, as the oracle's JSON lays it out."""

    def __init__(self, test):
        self.t = test

    def check(self, buffer):
        c = Oracle.describe(buffer)
        self.observation(buffer, c["observation"])
        self.tensor(buffer, c["tensor"])
        self.action(buffer, c["action"])
        self.request(buffer, c["request"])
        return c

    def observation(self, buffer, c):
        t = self.t
        m = GstPi0.buffer_get_pi0_observation_meta(buffer)
        if c is None:
            t.assertIsNone(m)
            return
        for field in ("version", "sequence", "observation_time", "n_views", "state_dim",
                      "state_time", "muxed_time"):
            t.assertEqual(getattr(m, field), c[field], field)
        t.assertEqual(m.get_n_views(), c["n_views"])
        t.assertEqual(int(m.state_flags), c["state_flags"])
        t.assertIsInstance(m.state_flags, GstPi0.StateFlags)
        state = m.get_state()
        if c["state"] is None:
            t.assertIsNone(state)
        else:
            t.assertTrue(same_floats(state, f32(c["state"])))
        t.assertIsNone(m.get_view(c["n_views"]))
        for i, cv in enumerate(c["views"]):
            v = m.get_view(i)
            t.assertEqual(v.get_name(), cv["name"])
            t.assertEqual(m.find_view(cv["name"]), i)
            t.assertEqual(int(v.flags), cv["flags"])
            t.assertIsInstance(v.flags, GstPi0.ViewFlags)
            for field in ("pts", "capture_time", "mem_index", "n_mem"):
                t.assertEqual(getattr(v, field), cv[field], field)
            fmt = v.info.finfo.format
            t.assertEqual("unknown" if fmt == GstVideo.VideoFormat.UNKNOWN
                          else GstVideo.VideoFormat.to_string(fmt), cv["format"])
            t.assertEqual((v.info.width, v.info.height), (cv["width"], cv["height"]))
            t.assertEqual(v.info.finfo.n_planes, cv["n_planes"])
            t.assertEqual(list(v.info.stride), cv["stride"])
            t.assertEqual(list(v.info.offset), cv["offset"])
            if cv["mapped"]:
                vb = m.get_view_buffer(buffer, i)
                t.assertEqual(plane_sum(vb, v), cv["pixel_sum"])
                vm = GstVideo.buffer_get_video_meta(vb)
                t.assertEqual((vm.width, vm.height), (cv["width"], cv["height"]))
            else:
                with t.assertRaises(GLib.Error) as e:
                    m.get_view_buffer(buffer, i)
                t.assertTrue(e.exception.matches(GstPi0.error_quark(), GstPi0.Error.INVALID))
        t.assertEqual(m.find_view("nowhere"), -1)

    def tensor(self, buffer, c):
        t = self.t
        m = GstPi0.buffer_get_pi0_tensor_meta(buffer)
        if c is None:
            t.assertIsNone(m)
            return
        t.assertEqual(m.version, c["version"])
        t.assertEqual(int(m.dtype), c["dtype"])
        t.assertEqual(m.dtype.value_nick, c["dtype_name"])
        t.assertEqual(GstPi0.dtype_to_string(m.dtype), c["dtype_name"])
        t.assertEqual(int(m.device), c["device"])
        t.assertEqual(m.device_id, c["device_id"])
        t.assertEqual(m.prepared_time, c["prepared_time"])
        t.assertEqual(m.get_shape(), c["shape"])
        t.assertEqual(m.n_dims, len(c["shape"]))
        t.assertEqual(m.get_masks(), c["masks"])
        t.assertEqual(m.get_n_elements(), c["n_elements"])
        t.assertEqual(m.get_nbytes(), c["nbytes"])
        t.assertEqual(m.storage.get_size() >= c["nbytes"], True)
        t.assertEqual(m.storage.get_device()[0], m.device)
        if c["data"] is not None:
            data = m.get_data_buffer()
            with data.map(Gst.MapFlags.READ) as info:
                dtype = {GstPi0.DType.FLOAT32: np.float32, GstPi0.DType.UINT8: np.uint8}[m.dtype]
                array = np.frombuffer(info.data, dtype=dtype).reshape(m.get_shape())
                if dtype is np.float32:
                    t.assertTrue(same_floats(array.ravel(), f32(c["data"])))
                else:
                    t.assertEqual(array.ravel().tolist(), c["data"])

    def action(self, buffer, c):
        t = self.t
        m = GstPi0.buffer_get_pi0_action_meta(buffer)
        if c is None:
            t.assertIsNone(m)
            t.assertIsNone(GstPi0.buffer_get_pi0_actions(buffer))
            return
        for field in ("version", "sequence", "observation_time", "inference_time", "done_time",
                      "model_time", "horizon", "dim", "model_id"):
            t.assertEqual(getattr(m, field), c[field], field)
        t.assertEqual(int(m.flags), c["flags"])
        t.assertIsInstance(m.flags, GstPi0.ActionFlags)
        t.assertTrue(same_floats(m.get_actions(), f32(c["actions"])))
        for r, row in enumerate(c["rows"]):
            t.assertTrue(same_floats(m.get_row(r), f32(row)))
        t.assertEqual(m.get_row(c["horizon"]), [])
        chunk, address = numpy_actions(buffer)
        t.assertEqual(chunk.shape, (c["horizon"], c["dim"]))
        t.assertTrue(same_floats(chunk.ravel(), f32(c["actions"])))
        # Read in place: numpy's array starts at the meta's own values.
        t.assertEqual(address, Pi0TestOracle.actions_address(buffer))

    def request(self, buffer, c):
        t = self.t
        m = GstPi0.buffer_get_pi0_request_meta(buffer)
        if c is None:
            t.assertIsNone(m)
            return
        for field in ("version", "server", "client_id", "request_id", "seed", "received_time",
                      "prompt", "error"):
            t.assertEqual(getattr(m, field), c[field], field)
        t.assertEqual(int(m.flags), c["flags"])


class ValuesAgainstC(unittest.TestCase):
    def test_a_buffer_made_in_c(self):
        buffer = Pi0TestOracle.make_buffer()
        c = ReadThroughIntrospection(self).check(buffer)
        # The oracle's buffer sets what the chain leaves unset: make sure it is all there.
        self.assertEqual([v["name"] for v in c["observation"]["views"]], ["main", "side", "top"])
        self.assertEqual(c["observation"]["views"][2]["stride"][:3], [8, 8, 8])
        self.assertTrue(GstPi0.buffer_get_pi0_action_meta(buffer).flags
                        & GstPi0.ActionFlags.NON_FINITE)
        self.assertTrue(math.isnan(GstPi0.buffer_get_pi0_action_meta(buffer).get_actions()[3]))
        self.assertEqual(GstPi0.buffer_get_pi0_request_meta(buffer).prompt, 'stack the "cups"')

    @unittest.skipUnless(Gst.ElementFactory.find("pi0infer"), "built without LibTorch")
    def test_the_chains_buffers(self):
        buffers = run_chain()
        self.assertGreaterEqual(len(buffers), 6)
        reader = ReadThroughIntrospection(self)
        for buffer in buffers:
            c = reader.check(buffer)
            self.assertIsNotNone(c["observation"])
            self.assertIsNotNone(c["tensor"])
            self.assertIsNotNone(c["action"])
            self.assertEqual(c["action"]["sequence"], c["observation"]["sequence"])
            self.assertEqual(c["action"]["dim"], 7)
            self.assertTrue(GstPi0.buffer_get_pi0_action_meta(buffer).flags
                            & GstPi0.ActionFlags.UNTRAINED)


class TypelibLayout(unittest.TestCase):
    def test_offsets_and_sizes_are_the_c_compilers(self):
        repo = GIRepository.Repository.get_default()
        for c_name, fields in Oracle.layout().items():
            info = repo.find_by_name("GstPi0", c_name[len("GstPi0"):])
            self.assertIsNotNone(info, c_name)
            self.assertEqual(GIRepository.struct_info_get_size(info), fields.pop("size"), c_name)
            offsets = {}
            for i in range(GIRepository.struct_info_get_n_fields(info)):
                field = GIRepository.struct_info_get_field(info, i)
                offsets[field.get_name()] = GIRepository.field_info_get_offset(field)
            for name, offset in fields.items():
                # The scanner sees the views under a private name (gstpi0observationmeta.h).
                gi_name = "_gi_views" if (c_name, name) == ("GstPi0ObservationMeta",
                                                            "views") else name
                self.assertEqual(offsets.get(gi_name), offset, f"{c_name}.{name}")

    def test_fields_python_cannot_read_right_are_not_guessed(self):
        buf = Pi0TestOracle.make_buffer()
        obs = GstPi0.buffer_get_pi0_observation_meta(buf)
        # An array of structs PyGObject cannot read: no attribute, rather than a wrong one.
        with self.assertRaises(AttributeError):
            obs.views
        # Pointers to values whose length is another field: addresses, never a wrong float.
        self.assertIsInstance(obs.state, int)
        self.assertIsInstance(GstPi0.buffer_get_pi0_action_meta(buf).actions, int)
        self.assertIsInstance(GstPi0.buffer_get_pi0_tensor_meta(buf).data, int)
        self.assertEqual(bytes(obs.get_view(0).name).rstrip(b"\0"), b"main")


def gir_symbols():
    """Every function, method and constructor of GstPi0-1.0.gir: (python path, introspectable)."""
    core = "{http://www.gtk.org/introspection/core/1.0}"
    c = "{http://www.gtk.org/introspection/c/1.0}"
    root = ET.parse(os.path.join(BUILD, "gst", "pi0", "GstPi0-1.0.gir")).getroot()
    ns = root.find(core + "namespace")
    out = []
    for kind in ("function", "method", "constructor"):
        for el in ns.iter(core + kind):
            owner = None
            for parent in ns:
                if el in list(parent):
                    owner = parent.get("name")
            path = (owner + "." if owner else "") + el.get("name")
            out.append((path, el.get(c + "identifier"), el.get("introspectable") != "0"))
    return out


# The C functions that introspection skips, each with its introspectable companion.
COMPANIONS = {
    "gst_buffer_add_pi0_action_meta": "buffer_add_pi0_action_meta_full",
    "gst_pi0_action_meta_get_action": "ActionMeta.get_row",
    "gst_buffer_add_pi0_tensor_meta": "buffer_add_pi0_tensor_meta_full",
    "gst_pi0_tensor_storage_new": "TensorStorage.new_from_bytes",
    "gst_pi0_tensor_storage_get_data": "TensorMeta.get_data_buffer",
    "gst_pi0_observation_meta_map_view": "ObservationMeta.get_view_buffer",
}


class EverySymbol(unittest.TestCase):
    def test_reachable_or_skipped_with_a_companion(self):
        symbols = gir_symbols()
        self.assertGreater(len(symbols), 50)
        skipped = set()
        for path, c_name, introspectable in symbols:
            target = GstPi0
            if introspectable:
                for part in path.split("."):
                    target = getattr(target, part, None)
                    self.assertIsNotNone(target, f"{path} ({c_name}) is not reachable")
                self.assertTrue(callable(target), path)
            else:
                skipped.add(c_name)
        self.assertEqual(skipped, set(COMPANIONS))
        for companion in COMPANIONS.values():
            target = GstPi0
            for part in companion.split("."):
                target = getattr(target, part)

    def test_enums_have_their_gtypes_and_nicks(self):
        nicks = {
            GstPi0.ActionFlags: {"non-finite", "untrained"},
            GstPi0.ViewFlags: {"valid", "cuda", "skewed"},
            GstPi0.StateFlags: {"present", "stale"},
            GstPi0.RequestFlags: {"client-seed"},
            GstPi0.EpisodeAction: {"start", "stop"},
            GstPi0.DType: {"float32", "float16", "bfloat16", "uint8"},
            GstPi0.Device: {"cpu", "cuda", "auto"},
            GstPi0.Error: {"invalid", "not-writable", "unavailable"},
        }
        for enum, want in nicks.items():
            self.assertNotEqual(enum.__gtype__, GObject.TYPE_INVALID, enum)
            if issubclass(enum, GObject.GFlags):
                got = {v.first_value_nick for v in enum.__flags_values__.values()} - {"none"}
            else:
                got = {v.value_nick for v in enum.__enum_values__.values()}
            self.assertEqual(got, want, enum)
        self.assertEqual(GstPi0.ActionFlags.NON_FINITE, 1)
        self.assertEqual(GstPi0.ViewFlags.SKEWED, 4)
        self.assertEqual(GstPi0.MAX_VIEWS, 8)
        self.assertEqual(GstPi0.INSTRUCTION_EVENT_NAME, "pi0-instruction")
        self.assertEqual(GstPi0.OBSERVATION_MEDIA_TYPE, "application/x-pi0-observation")


class Events(unittest.TestCase):
    def test_instruction(self):
        ev = GstPi0.instruction_event_new("stack the cups")
        self.assertEqual(ev.type, Gst.EventType.CUSTOM_DOWNSTREAM)
        self.assertEqual(ev.get_structure().get_name(), GstPi0.INSTRUCTION_EVENT_NAME)
        self.assertEqual(GstPi0.instruction_event_parse(ev), (True, "stack the cups"))
        self.assertFalse(GstPi0.instruction_event_parse(Gst.Event.new_eos())[0])

    def test_executing(self):
        ev = GstPi0.executing_event_new(12, 3, 5 * Gst.SECOND, 20 * Gst.MSECOND)
        self.assertEqual(ev.type, Gst.EventType.CUSTOM_UPSTREAM)
        ok, chunk, row, time, period = GstPi0.executing_event_parse(ev)
        self.assertEqual((ok, chunk, row, time, period),
                         (True, 12, 3, 5 * Gst.SECOND, 20 * Gst.MSECOND))
        # A zero period is malformed.
        self.assertFalse(GstPi0.executing_event_parse(GstPi0.executing_event_new(1, 0, 0, 0))[0])

    def test_episode(self):
        ok, action, task = GstPi0.episode_event_parse(
            GstPi0.episode_event_new(GstPi0.EpisodeAction.START, "fold"))
        self.assertEqual((ok, action, task), (True, GstPi0.EpisodeAction.START, "fold"))
        ok, action, task = GstPi0.episode_event_parse(
            GstPi0.episode_event_new(GstPi0.EpisodeAction.STOP, None))
        self.assertEqual((ok, action, task), (True, GstPi0.EpisodeAction.STOP, None))

    def test_caps(self):
        caps = GstPi0.observation_caps_new(["main", "side"], "main", 7, 30, 1, False)
        s = caps.get_structure(0)
        self.assertEqual(s.get_name(), GstPi0.OBSERVATION_MEDIA_TYPE)
        self.assertEqual(s.get_string("view-names"), "main,side")
        self.assertEqual(s.get_int("views"), (True, 2))
        self.assertEqual(s.get_int("state-dim"), (True, 7))


class MadeFromPython(unittest.TestCase):
    """A source written in Python makes the metas through the companions."""

    def test_all_four_and_c_reads_them(self):
        buf = Gst.Buffer.new()
        obs = GstPi0.buffer_add_pi0_observation_meta(buf)
        obs.sequence = 5
        info = GstVideo.VideoInfo.new()
        info.set_format(GstVideo.VideoFormat.RGB, 8, 4)
        frame = Gst.Buffer.new_wrapped(bytes([9]) * info.size)
        frame.pts = 40 * Gst.MSECOND
        view = obs.add_frame(buf, "main", info, frame, GstPi0.ViewFlags.NONE, Gst.SECOND)
        self.assertEqual(view.flags, GstPi0.ViewFlags.VALID)
        obs.add_view("side")
        obs.set_state([1.5, -2.0, 3.25], 7, GstPi0.StateFlags.NONE)
        storage = GstPi0.TensorStorage.new_from_bytes(
            GLib.Bytes.new(np.arange(24, dtype=np.float32).tobytes()))
        tensor = GstPi0.buffer_add_pi0_tensor_meta_full(buf, storage, GstPi0.DType.FLOAT32,
                                                        [2, 3, 4])
        tensor.set_masks_full([True, False])
        action = GstPi0.buffer_add_pi0_action_meta_full(buf, 2, 3, [1, 2, 3, 4, 5, 6], "py")
        action.sequence = 5
        GstPi0.buffer_add_pi0_request_meta(buf, "py-server", 1, 2, "fold", 99)
        c = ReadThroughIntrospection(self).check(buf)
        self.assertEqual(c["observation"]["views"][0]["pixel_sum"], 9 * 8 * 4 * 3)
        self.assertEqual(c["observation"]["views"][0]["pts"], 40 * Gst.MSECOND)
        self.assertEqual(c["observation"]["views"][0]["capture_time"], Gst.SECOND)
        self.assertEqual(c["observation"]["views"][1]["flags"], 0)
        self.assertEqual(c["observation"]["state"], [1.5, -2.0, 3.25])
        self.assertEqual(c["observation"]["state_flags"], int(GstPi0.StateFlags.PRESENT))
        self.assertEqual(c["tensor"]["data"], list(range(24)))
        self.assertEqual(c["tensor"]["masks"], [True, False])
        self.assertEqual(c["action"]["actions"], [1, 2, 3, 4, 5, 6])
        self.assertEqual(c["request"]["prompt"], "fold")


class Lifetimes(unittest.TestCase):
    """docs/meta.md's rule: a meta (and a view) is valid while its buffer lives; what
    buffer_get_pi0_actions(), get_data_buffer() and get_view_buffer() return holds its own
    references and may outlive the buffer."""

    def test_values_outlive_their_buffer(self):
        buf = Pi0TestOracle.make_buffer()
        want = Oracle.describe(buf)
        obs = GstPi0.buffer_get_pi0_observation_meta(buf)
        actions = GstPi0.buffer_get_pi0_actions(buf)
        data = GstPi0.buffer_get_pi0_tensor_meta(buf).get_data_buffer()
        view = obs.get_view_buffer(buf, 0)
        del obs, buf
        gc.collect()
        with actions.map(Gst.MapFlags.READ) as info:
            self.assertTrue(same_floats(np.frombuffer(info.data, np.float32),
                                        f32(want["action"]["actions"])))
        with data.map(Gst.MapFlags.READ) as info:
            self.assertTrue(same_floats(np.frombuffer(info.data, np.float32),
                                        f32(want["tensor"]["data"])))
        with view.map(Gst.MapFlags.READ) as info:
            self.assertEqual(int(np.frombuffer(info.data, np.uint8).sum()),
                             want["observation"]["views"][0]["pixel_sum"])

    def test_values_keep_the_buffer_unwritable(self):
        buf = Gst.Buffer.new()
        GstPi0.buffer_add_pi0_action_meta_full(buf, 1, 2, [1, 2], None)
        actions = GstPi0.buffer_get_pi0_actions(buf)
        with self.assertRaises(GLib.Error) as e:
            GstPi0.buffer_add_pi0_action_meta_full(buf, 1, 1, [0], None)
        self.assertTrue(e.exception.matches(GstPi0.error_quark(), GstPi0.Error.NOT_WRITABLE))
        # The domain as GLib names such domains (a formatter once spaced it out).
        self.assertEqual(e.exception.domain, "gst-pi0-error-quark")
        del actions
        gc.collect()
        self.assertIsNotNone(GstPi0.buffer_add_pi0_action_meta_full(buf, 1, 1, [0], None))

    @unittest.skipUnless(Gst.ElementFactory.find("pi0infer"), "built without LibTorch")
    def test_a_held_buffer_outlives_its_pipeline(self):
        buffers = run_chain()
        gc.collect()
        # The pipeline is gone; the buffers Python holds keep their metas.
        for buffer in buffers:
            ReadThroughIntrospection(self).check(buffer)


def use_every_accessor(n, keep=False):
    """n buffers made in C, each read through every accessor and numpy, copied, plus events and
    metas made from Python; with keep, the actions' values buffers are kept (a leak on purpose)."""
    kept = []
    for i in range(n):
        buf = Pi0TestOracle.make_buffer()
        obs = GstPi0.buffer_get_pi0_observation_meta(buf)
        obs.get_state()
        obs.get_view(0).get_name()
        with obs.get_view_buffer(buf, 0).map(Gst.MapFlags.READ) as info:
            np.frombuffer(info.data, np.uint8).sum()
        tensor = GstPi0.buffer_get_pi0_tensor_meta(buf)
        tensor.get_shape()
        tensor.get_masks()
        with tensor.get_data_buffer().map(Gst.MapFlags.READ) as info:
            np.frombuffer(info.data, np.float32).sum()
        numpy_actions(buf)
        GstPi0.buffer_get_pi0_action_meta(buf).get_actions()
        if keep:
            kept.append(GstPi0.buffer_get_pi0_actions(buf))
        copy = buf.copy_deep()
        GstPi0.buffer_get_pi0_request_meta(copy).prompt
        ev = GstPi0.instruction_event_new(f"task {i}")
        GstPi0.instruction_event_parse(ev)
        py = Gst.Buffer.new()
        GstPi0.buffer_add_pi0_tensor_meta_full(
            py, GstPi0.TensorStorage.new_from_bytes(GLib.Bytes.new(b"\0" * 16)),
            GstPi0.DType.FLOAT32, [4])
        try:
            GstPi0.buffer_add_pi0_action_meta_full(py, 2, 2, [1.0], None)
        except GLib.Error:
            pass
    return kept


def leaked_objects(n, keep=False):
    """The objects the leaks tracer finds alive at gst_deinit() after use_every_accessor(n), in
    a child interpreter (the tracer reports once, at the end of the process's GStreamer)."""
    env = dict(os.environ, GST_TRACERS="leaks", GST_DEBUG="GST_TRACER:7", GST_DEBUG_NO_COLOR="1")
    args = [sys.executable, __file__, "--leak-child", str(n)] + (["keep"] if keep else [])
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"the child failed ({r.returncode}): {r.stderr[-2000:]}")
    return [line for line in r.stderr.splitlines()
            if "object-alive, type-name=" in line and "new format string" not in line]


class NoLeaks(unittest.TestCase):
    def test_the_detector_sees_a_leak(self):
        # Ten values buffers kept: each with its memory, and the buffer it holds with its own.
        self.assertGreaterEqual(len(leaked_objects(10, keep=True)), 20)

    def test_ten_thousand_buffers(self):
        leaks = leaked_objects(10000)
        self.assertEqual(leaks, [], "\n".join(leaks[:10]))


class BadCalls(unittest.TestCase):
    """Wrong input from Python is a Python exception, never a crash."""

    def assertPi0Error(self, code, fn, *args):
        with self.assertRaises(GLib.Error) as e:
            fn(*args)
        self.assertTrue(e.exception.matches(GstPi0.error_quark(), code), e.exception.message)
        self.assertTrue(e.exception.message)

    def test_none_where_not_nullable(self):
        for fn, args in [(GstPi0.instruction_event_new, (None,)),
                         (GstPi0.buffer_get_pi0_action_meta, (None,)),
                         (GstPi0.buffer_get_pi0_actions, (None,)),
                         (GstPi0.buffer_get_pi0_observation_meta, (None,)),
                         (GstPi0.instruction_event_parse, (None,)),
                         (GstPi0.TensorStorage.new_from_bytes, (None,)),
                         (GstPi0.observation_caps_new, (["main"], None, 0, 0, 1, False)),
                         # Not an enum value: PyGObject checks the enum's GType.
                         (GstPi0.episode_event_new, (7, None))]:
            with self.assertRaises(TypeError, msg=fn.__name__):
                fn(*args)

    def test_wrong_sizes(self):
        buf = Gst.Buffer.new()
        full = GstPi0.buffer_add_pi0_action_meta_full
        self.assertPi0Error(GstPi0.Error.INVALID, full, buf, 2, 3, [1.0] * 5, None)
        self.assertPi0Error(GstPi0.Error.INVALID, full, buf, 0, 3, None, None)
        self.assertIsNone(GstPi0.buffer_get_pi0_action_meta(buf))
        storage = GstPi0.TensorStorage.new_from_bytes(GLib.Bytes.new(b"\0" * 16))
        tensor = GstPi0.buffer_add_pi0_tensor_meta_full
        self.assertPi0Error(GstPi0.Error.INVALID, tensor, buf, storage, GstPi0.DType.FLOAT32, [5])
        self.assertPi0Error(GstPi0.Error.INVALID, tensor, buf, storage, GstPi0.DType.FLOAT32,
                            [1] * 9)
        self.assertPi0Error(GstPi0.Error.INVALID, tensor, buf, storage, GstPi0.DType.UINT8, [-1])
        self.assertIsNone(GstPi0.buffer_get_pi0_tensor_meta(buf))
        m = tensor(buf, storage, GstPi0.DType.UINT8, [4, 4])
        self.assertPi0Error(GstPi0.Error.INVALID, m.set_masks_full, [True] * 9)
        self.assertEqual(m.get_masks(), [])
        with self.assertRaises(OverflowError):
            GstPi0.buffer_add_pi0_action_meta_full(buf, -1, 3, None, None)

    def test_c_api_guards_without_a_gerror_return_none_and_change_nothing(self):
        # The functions without a GError check their input with GLib's guards, as GStreamer's
        # do: a critical on stderr and None, never a crash nor a half-made meta.
        buf = Pi0TestOracle.make_buffer()
        obs = GstPi0.buffer_get_pi0_observation_meta(buf)
        self.assertIsNone(obs.add_view("x" * GstPi0.VIEW_NAME_LEN))
        self.assertEqual(obs.get_n_views(), 3)
        tensor = GstPi0.buffer_get_pi0_tensor_meta(buf)
        tensor.set_masks([True] * 9)
        self.assertEqual(tensor.get_masks(), [True, False, True])
        self.assertEqual(Oracle.describe(buf), Oracle.describe(Pi0TestOracle.make_buffer()))

    def test_device_memory_is_refused(self):
        buf = Pi0TestOracle.make_device_tensor_buffer()
        tensor = GstPi0.buffer_get_pi0_tensor_meta(buf)
        self.assertEqual(tensor.device, GstPi0.Device.CUDA)
        self.assertEqual(tensor.get_shape(), [16])
        self.assertPi0Error(GstPi0.Error.UNAVAILABLE, tensor.get_data_buffer)

    def test_views_that_are_not_there(self):
        buf = Pi0TestOracle.make_buffer()
        obs = GstPi0.buffer_get_pi0_observation_meta(buf)
        self.assertPi0Error(GstPi0.Error.INVALID, obs.get_view_buffer, buf, 1)  # masked
        self.assertPi0Error(GstPi0.Error.INVALID, obs.get_view_buffer, buf, 3)  # none
        # Another buffer than the meta's: its memories do not hold the views.
        self.assertPi0Error(GstPi0.Error.INVALID, obs.get_view_buffer, Gst.Buffer.new(), 0)


SOURCE = os.environ.get("PI0_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "../../../.."))
EXAMPLES = os.path.join(SOURCE, "docs", "examples")


def run_example(name, *args):
    """docs/examples/<name> as a user runs it: python3 file.py, from a scratch directory."""
    import tempfile

    with tempfile.TemporaryDirectory() as cwd:
        r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], cwd=cwd,
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{name} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


@unittest.skipUnless(Gst.ElementFactory.find("pi0infer"), "built without LibTorch")
class Examples(unittest.TestCase):
    def test_actions_numpy(self):
        out = run_example("actions-numpy.py", "--frames", "12")
        chunks = [line for line in out.splitlines() if line.startswith("chunk ")]
        self.assertEqual(len(chunks), 12, out)
        self.assertTrue(all(": 50x7 float32, inference " in line for line in chunks), out)
        self.assertIn("12 action chunks", out)

    def test_instruction_stats(self):
        out = run_example("instruction-stats.py", "--at", "7", "--instruction", "fold it")
        self.assertIn("pi0infer: 'fold it' from observation 7 on", out)
        self.assertIn("pi0infer stats (pi0infer-stats):", out)
        self.assertIn("  chunks = 30", out)
        self.assertIn("pi0actionsink stats (pi0actionsink-stats):", out)
        self.assertIn("  frames = 30", out)
        self.assertIn("30 chunks logged", out)

    def test_replay_compare(self):
        out = run_example("replay-compare.py")
        self.assertIn("30 recorded chunks, 30 replayed, 30 bitwise equal", out)

    def test_observation_numpy(self):
        out = run_example("observation-numpy.py", "--every", "1", "--top-frames", "3")
        self.assertIn("  main  RGB  640x480, stride 1920, plane 0 (480, 1920)", out)
        self.assertIn("  side  NV12 320x240, stride 320, plane 0 (240, 320)", out)
        self.assertIn("  top   MASKED", out)
        self.assertIn("masks [True, True, False]", out)
        self.assertIn("tensor float32 [3, 3, 32, 32], masks [True, True, True]", out)


class MetaDocQuotesTheExamples(unittest.TestCase):
    def test_every_python_block_is_in_an_example(self):
        with open(os.path.join(SOURCE, "docs", "meta.md")) as f:
            doc = f.read()
        section = doc[doc.index("## From Python"):]
        blocks = section.split("```python\n")[1:]
        self.assertGreaterEqual(len(blocks), 2)
        examples = ""
        for name in sorted(os.listdir(EXAMPLES)):
            if name.endswith(".py"):
                with open(os.path.join(EXAMPLES, name)) as f:
                    examples += f.read() + "\n"
        for block in blocks:
            code = block[:block.index("```")]
            self.assertIn(code, examples, "docs/meta.md quotes code no example runs")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--leak-child":
        kept = use_every_accessor(int(sys.argv[2]), keep=sys.argv[3:] == ["keep"])
        gc.collect()
        Gst.deinit()
        sys.exit(0)
    unittest.main(verbosity=2)
