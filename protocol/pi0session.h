/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The robot session: the rules both ends of the action protocol follow (docs/protocol.md,
 * "Sessions and sequence numbers", "Timing of rows", "Receiver rules"), as two state machines
 * with no I/O and no clock of their own. They are given the time with every input and answer
 * with what to send (sender) or what to execute (receiver) and when they next need to be woken,
 * so pi0actionsink, pi0-robotsim and the property tests drive exactly the same code, the tests
 * millions of steps a second without a socket or a sleep.
 *
 * Shape (after gst-plugins-rs' fallbackswitch): Settings are fixed for a session's life and
 * checked once by validate(); the state is private and changed only by the inputs; outputs are
 * plain structs the caller turns into I/O. Nothing here throws or takes a lock: the caller
 * owns the one lock. Errors: a result code or false plus a message, as everywhere in protocol/.
 *
 * Times are nanoseconds. The sender's are running times of its pipeline clock; the receiver's
 * its own monotonic clock. kTimeNone means "no clock" (not PLAYING). */

#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pi0::proto
{

/* Sequence numbers never wrap: 1 .. kMaxSeq per session (a sender that would pass it starts a
 * new session; at a million frames a second that is 292,000 years away). A receiver refuses
 * seq 0 and anything above kMaxSeq, and a frame claiming more than kMaxSeqJump frames were
 * lost since the last one it accepted (docs/protocol.md, "Sessions and sequence numbers"). */
constexpr uint64_t kMaxSeq = (1ull << 63) - 1;
constexpr uint64_t kMaxSeqJump = 1ull << 32;
/* How many of the last chunks sent a robot's FEEDBACK may name (docs/protocol.md, "FEEDBACK"). */
constexpr size_t kFeedbackHistory = 16;
/* Longest step period a receiver accepts (pi0actionsink's slowest control rate, 0.1 Hz): rows
 * further apart would keep a robot waiting, and its watchdog with it. */
constexpr uint64_t kMaxStepPeriod = 10000000000ull;

/* What the robot executes: row `row` of chunk `chunk_id` started at `time_ns`. The sender
 * reports it for its own stream stepping and takes it as an input (Sender::feedback), so that a
 * robot reporting what it executes (chunk mode over a network: the FEEDBACK message) refines
 * the sender's picture of it; the receiver answers it for any time (Receiver::executing). */
struct Feedback {
  uint64_t chunk_id = 0;
  uint32_t row = 0;
  uint64_t time_ns = kTimeNone;
};

/* ---- Sender: the rules of pi0actionsink --------------------------------------------------- */

enum class SendMode {
  kChunk,  /* each chunk sent whole on arrival, the robot schedules the rows */
  kStream, /* one row per control tick, from the newest chunk */
  kLog,    /* every chunk whole and unmodified (recordings; never a robot) */
};

struct SenderSettings {
  SendMode mode = SendMode::kStream;
  uint64_t period_ns = 20000000; /* one row per period: 1 / control rate */
  uint32_t execute_steps = 0;    /* use at most this many rows of a chunk (0 = all) */
  uint64_t max_action_age_ns = 1000000000;
  uint64_t hold_timeout_ns = 100000000;
  uint64_t stop_timeout_ns = 1000000000;
  std::optional<RobotConfig> robot; /* limits and max_step; none = finiteness checks only */
  /* Datagram budget: a chunk is split into frames of at most this many bytes (0 = one frame
   * per message, for byte streams and files). */
  size_t max_frame_size = 0;
  bool hmac = false; /* frames will carry the HMAC trailer (it counts against the budget) */
  /* The HMAC key (binary targets): the robot's FEEDBACK must carry a valid HMAC with it, or none
   * when it is empty. */
  std::string key;
};

/* Checks @s; false with a message naming the setting (in pi0actionsink's property names). */
bool validate (const SenderSettings &s, std::string *error);

/* What a chunk of actions brings (GstPi0ActionMeta, without GStreamer). */
struct ChunkIn {
  const float *values = nullptr; /* horizon × dim, row-major */
  uint32_t horizon = 0;
  uint32_t dim = 0;
  uint64_t chunk_id = 0;
  uint64_t observation_time_ns = kTimeNone; /* capture time of the observation it answers */
  bool flagged_non_finite = false;          /* upstream says a value is NaN/Inf */
  std::string model_id;
  /* The robot's position measured at the observation (dim values), or nullptr: the step
   * bound's reference for the first row after an episode start (SenderEvent::kEpisode). */
  const float *measured = nullptr;
};

enum class ChunkResult {
  kSent,     /* chunk or log mode: frames are in the output */
  kQueued,   /* stream mode: its rows go out at the next ticks */
  kRejected, /* refused whole: non-finite, or no observation time (a warning says which) */
  kStale,    /* older than max-action-age or wholly in the past (a warning says so) */
  kIgnored,  /* flushing, or no clock yet: nothing may move the robot */
  kError,    /* shape the session cannot carry (dimension changed, too large): *error says */
};

/* One frame to put on the transport, complete but for encoding (binary with the key, or a JSON
 * line with model_id). */
struct OutFrame {
  Header header;
  std::vector<float> values;
  std::string model_id;
};

/* One message as decided, before splitting: what pi0actionsink's `action` signal reports. */
struct SentMessage {
  Kind kind = Kind::kAction;
  uint64_t chunk_id = 0;
  uint32_t step_index = 0;
  uint32_t steps = 0;
  uint32_t dim = 0;
  std::vector<float> values;    /* steps × dim, exactly as sent */
  uint64_t time_ns = kTimeNone; /* when it was sent */
  bool first_of_chunk = false;  /* the first rows of this chunk to leave (latency stamp) */
};

struct SenderOutput {
  std::vector<OutFrame> frames;      /* in order; HELLO included */
  std::vector<SentMessage> sent;     /* ACTION, HOLD and STOP messages, in order */
  std::vector<std::string> warnings; /* rejected or stale chunks, STOP */
  std::vector<Feedback> executing;   /* rows the robot starts now, as the sender sees it */
  void clear ()
  {
    frames.clear ();
    sent.clear ();
    warnings.clear ();
    executing.clear ();
  }
};

struct SenderCounters {
  uint64_t rejected = 0; /* chunks refused whole */
  uint64_t clamped = 0;  /* action rows with at least one value clamped */
  uint64_t stale = 0;    /* chunks dropped for age, or wholly in the past */
  uint64_t holds = 0;    /* watchdog, pause, flush and EOS HOLDs (not the greeting) */
  uint64_t stops = 0;
  uint64_t sessions = 0;
  uint64_t feedback = 0;         /* robot FEEDBACK reports taken */
  uint64_t feedback_dropped = 0; /* robot frames refused by robot_frame() */
};

/* A change of the sender's pipeline state. */
enum class SenderEvent {
  kPlaying,    /* PAUSED -> PLAYING: the clock runs from `now` */
  kPaused,     /* PLAYING -> PAUSED: HOLD, nothing more until kPlaying */
  kFlushStart, /* HOLD, pending rows dropped, chunks ignored until kFlushStop */
  kFlushStop,
  kEos, /* HOLD, pending rows dropped */
  /* An episode starts: the robot may have been moved (reset, a scene set up), so what it was
   * commanded says nothing of where it is. Pending rows are dropped, a HOLD without a row is
   * sent (the robot holds where it is) and the step bound forgets its reference: a HOLD carries
   * no position until a chunk is sent, and the next chunk's first row is bounded against the
   * position the robot measured at its observation (ChunkIn::measured), or by the limits alone
   * when there is none (the robot bounds its own step). */
  kEpisode,
};

class Sender
{
public:
  /* Starts the first session (not announced until the link is up and the dimension known).
   * @session_ids gives each new session's id (random by default; tests pass their own). */
  explicit Sender (SenderSettings settings, std::function<uint64_t ()> session_ids = nullptr);

  /* A chunk arrives at @now. */
  ChunkResult chunk (uint64_t now, const ChunkIn &chunk, SenderOutput &out, std::string *error);
  /* Wake-up at @now (at or after next_deadline()): stream stepping and the watchdog. */
  void tick (uint64_t now, SenderOutput &out);
  void event (uint64_t now, SenderEvent e, SenderOutput &out);
  /* The transport's state: @up when it can carry frames; @new_connection once per new
   * connection of a connected transport (TCP), which starts a new session. Announces the
   * session (HELLO, HOLD) when it can. */
  void link (uint64_t now, bool up, bool new_connection, SenderOutput &out);
  /* The robot reports what it executes. Chunk mode: a report about the chunk being executed
   * replaces the sender's estimate from the clock (the reference of the next chunk's step bound
   * and of HOLD). Stream mode: ignored (the sender itself decides which row runs). */
  void feedback (uint64_t now, const Feedback &fb);
  /* One candidate frame from the robot, read at @now: a FEEDBACK is checked as docs/protocol.md
   * ("What a sender checks") says. A report taken goes to feedback() and to out.executing, and
   * from then on in this session the reports, not the sender's estimate, are what out.executing
   * carries in chunk mode. Returns nullptr when taken, otherwise why the frame was dropped
   * (counted in counters().feedback_dropped; nothing else changes). Never sends anything. */
  const char *robot_frame (uint64_t now, const uint8_t *data, size_t len, SenderOutput &out);
  /* A robot report was taken in this session. */
  bool robot_reports () const { return robot_reports_; }

  /* When tick() is next needed: the next control tick or watchdog deadline, whichever comes
   * first (kTimeNone in log mode, which needs no ticks). */
  uint64_t next_deadline () const;

  const SenderSettings &settings () const { return s_; }
  const SenderCounters &counters () const { return counters_; }
  uint64_t session_id () const { return session_id_; }
  uint64_t seq () const { return seq_; }
  uint32_t dim () const { return dim_; }

private:
  struct Chunk {
    std::vector<float> values;
    uint32_t limit = 0; /* rows usable: min (horizon, execute-steps) */
    uint32_t next = 0;  /* first row not yet sent */
    uint64_t chunk_id = 0;
    uint64_t obs = kTimeNone;
    std::string model_id;
    std::vector<float> measured; /* ChunkIn::measured, or empty */
  };

  void new_session ();
  const char *check_feedback (uint64_t now, const Frame &f) const;
  void announce (uint64_t now, SenderOutput &out);
  void emit (Kind kind, const float *values, uint32_t steps, uint32_t step_index,
             uint32_t chunk_steps, uint64_t chunk_id, uint64_t obs, uint64_t now, uint8_t flags,
             const std::string &model_id, bool first_of_chunk, SenderOutput &out);
  const float *commanded_now (uint64_t now) const;
  void send_hold (uint64_t now, SenderOutput &out);
  void stream_step (uint64_t now, SenderOutput &out);
  void watchdog (uint64_t now, SenderOutput &out);
  const RobotConfig *cfg () const { return s_.robot ? &*s_.robot : nullptr; }

  SenderSettings s_;
  std::function<uint64_t ()> session_ids_;
  SenderCounters counters_;
  uint32_t dim_ = 0; /* from the configuration, or fixed by the first chunk */
  uint64_t session_id_ = 0;
  uint64_t seq_ = 0;
  bool announced_ = false;
  bool link_up_ = false;
  bool flushing_ = false;

  /* Stream mode: the chunk being stepped through. */
  bool have_chunk_ = false;
  Chunk chunk_;
  /* Chunk mode: the rows of the last chunk sent (after clamping) and when its first row ran,
   * to know which one is being executed; a robot's feedback replaces the estimate. */
  std::vector<float> sent_rows_;
  uint32_t sent_first_ = 0;
  uint64_t sent_chunk_id_ = 0;
  uint64_t sent_obs_ = kTimeNone;
  uint64_t sent_ns_ = kTimeNone; /* when the last chunk was sent */
  /* How much later than its schedule (row `first` on receipt) the robot starts rows, from its
   * last report about a chunk of this session; 0 until one comes. */
  uint64_t robot_lag_ns_ = 0;
  std::optional<Feedback> anchor_;
  /* Chunk mode: the last chunks sent in this session, for the robot's reports to name. */
  struct SentChunk {
    uint64_t chunk_id;
    uint32_t first, limit; /* rows [first, limit) were sent */
    uint64_t sent_ns;
  };
  std::deque<SentChunk> sent_chunks_;
  uint64_t fb_seq_ = 0; /* seq of the last report taken in this session */
  bool robot_reports_ = false;
  Frame fb_frame_; /* scratch */

  std::vector<float> last_cmd_; /* position last commanded (stream rows, HOLD position) */
  bool have_last_ = false;
  /* An episode started and nothing was commanded since: no reference, not even `initial`. */
  bool episode_reset_ = false;

  /* Watchdog: due time of the last action row sent. */
  uint64_t last_fresh_ = 0;
  bool hold_sent_ = true; /* the greeting HOLD counts as one */
  bool stop_sent_ = false;
  uint64_t next_tick_ = 0;
};

/* ---- Receiver: the rules of a robot (pi0-robotsim) ---------------------------------------- */

/* When the rows of ACTION messages run (docs/protocol.md, "Timing of rows"): the one rule the
 * Receiver schedules by and CommandTimeline replays. A new chunk's first row runs on receipt and
 * row i step_period after row i-1, counted from the chunk's base row; a later message of the
 * same chunk continues from that base (rows of a split chunk keep their places however late a
 * frame comes); a stream row runs on receipt and replaces whatever was planned. */
struct RowTiming {
  bool have_chunk = false; /* chunk mode: later messages of chunk_id continue its base */
  uint64_t chunk_id = 0;
  uint64_t base_ns = 0; /* when row base_step of the message begun last runs */
  uint32_t base_step = 0;
  uint32_t next_step = 0; /* chunk mode: the first row of chunk_id not received yet */

  /* A message of chunk @chunk_id from row @step_index goes back into rows already received: not
   * a plan a robot can follow (the Receiver refuses it: "step-order"). */
  bool goes_back (uint64_t chunk_id, uint32_t step_index, bool stream) const
  {
    return !stream && have_chunk && chunk_id == this->chunk_id && step_index < next_step;
  }
  /* An ACTION message of @steps rows from @step_index, received at @now. True when it begins a
   * new plan (a stream row, another chunk): the rows still pending are dropped. */
  bool begin (uint64_t now, uint64_t chunk_id, uint32_t step_index, uint32_t steps, bool stream);
  /* When row @step_index of the message begun last runs, rows @period_ns apart. */
  uint64_t row_at (uint32_t step_index, uint64_t period_ns) const;
  /* HOLD, STOP, a new session, the watchdog: no chunk goes on, the next message begins anew. */
  void clear () { have_chunk = false; }
};

struct ReceiverSettings {
  Limits limits;
  std::string key;                  /* non-empty: every frame must carry a valid HMAC */
  uint32_t dim = 0;                 /* expected joints (0 = any; the configuration's if set) */
  std::optional<RobotConfig> robot; /* limits are refused, max_step is clamped */
  /* The robot's own watchdog, from the time its last commanded row ran: HOLD, then STOP
   * (0 = off). */
  uint64_t hold_timeout_ns = 0;
  uint64_t stop_timeout_ns = 0;
  size_t retired_sessions = 4096; /* how many replaced session ids are remembered */
};

/* Checks @s; false with a message. */
bool validate (const ReceiverSettings &s, std::string *error);

/* One row the robot will execute. */
struct ExecRow {
  uint64_t chunk_id = 0;
  uint32_t step_index = 0;
  uint64_t at_ns = 0;           /* when it runs, on the receiver's clock */
  std::vector<float> values;    /* what runs (after the max_step clamp) */
  bool limited = false;         /* the robot's max_step changed a value */
  std::vector<float> requested; /* the frame's values, when limited */
};

/* What receive() made of one frame. */
struct Received {
  const char *reject = nullptr; /* the reason (error_name() or a session rule), or nullptr */
  bool new_session = false;     /* this frame started a session */
  Frame frame;                  /* decoded (when accepted) */
  std::vector<ExecRow> rows;    /* ACTION: the rows scheduled */
  std::vector<float> hold;      /* HOLD: the position held (empty: where it is) */
  bool hold_limited = false;
};

/* A decision of the robot's own watchdog. */
struct WatchdogEvent {
  Kind kind = Kind::kHold; /* kHold or kStop */
  uint64_t at_ns = 0;      /* its deadline */
};

struct ReceiverCounters {
  uint64_t frames = 0;   /* accepted */
  uint64_t executed = 0; /* rows scheduled */
  uint64_t rejected = 0;
  uint64_t limited = 0; /* rows or HOLD positions changed by max_step */
  uint64_t sessions = 0;
};

class Receiver
{
public:
  explicit Receiver (ReceiverSettings settings);

  /* One complete candidate frame, received at @now. */
  void receive (uint64_t now, const uint8_t *data, size_t len, Received &out);
  /* The robot's watchdog at @now (at or after next_deadline()). */
  void tick (uint64_t now, std::vector<WatchdogEvent> &out);
  uint64_t next_deadline () const;

  /* Runs the rows due by @now; the position commanded then (empty until one is known). */
  const std::vector<float> &position (uint64_t now);
  /* The row being executed at @now (chunk_id 0 and time kTimeNone before any). */
  Feedback executing (uint64_t now);
  /* The FEEDBACK to send at @now (docs/protocol.md, "FEEDBACK"): the row of a chunk-mode chunk
   * of the current session that started last, if not reported yet; false when there is nothing
   * new. The caller encodes it with its key and sends it to the sender. */
  bool feedback (uint64_t now, Header *out);
  /* When the next scheduled row starts (kTimeNone: none): a robot reporting each row wakes then. */
  uint64_t next_row () const;

  const ReceiverSettings &settings () const { return s_; }
  const ReceiverCounters &counters () const { return counters_; }
  bool has_session () const { return have_session_; }
  uint64_t session_id () const { return session_; }
  bool stopped () const { return stopped_; }

private:
  struct Scheduled {
    uint64_t at_ns;
    uint64_t chunk_id;
    uint32_t step_index;
    std::vector<float> values;
    uint64_t sender_ns; /* chunk mode: its start on the sender's clock; kTimeNone in stream mode */
  };
  const char *check (const Frame &f) const;
  void advance (uint64_t now);
  /* Drops the rows still to run; clear_schedule() forgets their chunk's timing too. */
  void drop_schedule ();
  void clear_schedule ();
  /* Clamps @in to max_step from @prev into @out; true when it changed something. */
  bool limit (const std::vector<float> *prev, const float *in, std::vector<float> &out);

  ReceiverSettings s_;
  ReceiverCounters counters_;
  bool have_session_ = false;
  uint64_t session_ = 0;
  uint64_t last_seq_ = 0;
  std::deque<uint64_t> retired_;

  std::vector<float> position_; /* last executed (or held) command */
  Feedback executing_;
  /* What FEEDBACK reports about executing_: its start on the sender's clock (kTimeNone: a stream
   * row, never reported), its session, and whether it was reported. */
  uint64_t exec_sender_ns_ = kTimeNone;
  uint64_t exec_session_ = 0;
  uint64_t exec_serial_ = 0, reported_serial_ = 0;
  uint64_t fb_seq_ = 0;
  std::deque<Scheduled> schedule_; /* rows still to run, in time order */
  RowTiming timing_;               /* chunk mode: the chunk the schedule belongs to */
  uint64_t chunk_send_ns_ = kTimeNone; /* send_time_ns of the frame timing_.base_ns is from */
  bool stopped_ = false;

  /* Watchdog: when the last commanded row runs. */
  bool commanded_ = false;
  uint64_t last_cmd_ns_ = 0;
  bool wd_hold_ = false;
  bool wd_stop_ = false;
};

/* ---- CommandTimeline: what a robot was commanded, from what a sender sent ----------------- */

/* What a robot was commanded over time, rebuilt from the messages a pi0actionsink sent (its
 * `action` signal), as a Receiver given each message at its send time would execute them: ACTION
 * rows by RowTiming, rows @period_ns apart (the sender's control period; stream rows when
 * @stream); a HOLD with a position commands it from its send time on; a HOLD without one and a
 * STOP leave the robot where it is. HOLD, STOP, a stream row and a new chunk drop the rows still
 * pending; a later message of the same chunk adds to them. pi0lerobotsink records a dataset's
 * actions with it. Times are int64 nanoseconds, >= 0. */
class CommandTimeline
{
public:
  explicit CommandTimeline (int64_t period_ns = 20000000, bool stream = false)
      : period_ (period_ns), stream_ (stream)
  {
  }
  void set_period (int64_t period_ns) { period_ = period_ns; }
  /* @kind: "action", "hold" or "stop" (anything else changes nothing); @rows x @dim values,
   * rows from @step_index of chunk @chunk_id; @send_ns non-decreasing. An ACTION going back into
   * rows of its chunk already given is ignored, as a Receiver refuses it. */
  void add (const std::string &kind, uint64_t chunk_id, uint32_t step_index, int64_t send_ns,
            const float *values, size_t rows, size_t dim);
  /* The command in effect at @t_ns (the last row due at or before it), or nothing yet. */
  const std::vector<float> *at (int64_t t_ns) const;
  /* Forgets rows superseded before @t_ns (keeps the one in effect then). */
  void prune (int64_t t_ns);
  size_t size () const { return entries_.size (); }

private:
  struct Entry {
    int64_t t;
    std::vector<float> v;
  };
  void drop_after (int64_t t_ns);

  std::vector<Entry> entries_; /* in time order */
  int64_t period_;
  bool stream_;
  RowTiming timing_;
};

} // namespace pi0::proto
