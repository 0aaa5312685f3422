/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The pi0 action wire protocol, version 1 (docs/protocol.md is the normative description; keep
 * the two in step). No GStreamer here: the sink, the robot simulator, the tests and the fuzz
 * target all share this code, so the robot side and the pipeline side parse the same bytes the
 * same way. Everything is little-endian on the wire whatever the host. */

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pi0::proto
{

/* "PI0A" read as bytes. */
constexpr uint32_t kMagic = 0x41304950u;
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderSize = 72;
constexpr size_t kCrcSize = 4;
constexpr size_t kHmacSize = 32;

/* Hard ceilings of the format; a receiver may set lower ones in Limits. */
constexpr uint32_t kMaxDim = 256;
constexpr uint32_t kMaxSteps = 4096;
/* Largest frame a decoder ever accepts, whatever Limits says. */
constexpr size_t kMaxFrameSize =
    kHeaderSize + (size_t)kMaxDim * kMaxSteps * 4 + kCrcSize + kHmacSize;
/* Default datagram budget: fits a 1500-byte Ethernet MTU after IPv4/IPv6 + UDP headers, so no
 * frame is ever IP-fragmented (a lost fragment would lose the whole frame). */
constexpr size_t kDefaultDatagramSize = 1400;

enum class Kind : uint8_t {
  kAction = 1, /* rows of actions to execute */
  kHold = 2,   /* keep the position in the payload (or the current one when empty) */
  kStop = 3,   /* stop: the sender has had no fresh action for stop-timeout */
  kHello = 4,  /* first frame of a session: announces dim, no payload */
  /* Robot -> sender: the row the robot executes (docs/protocol.md, "FEEDBACK"). The only kind
   * that travels that way; a receiver refuses it, a sender takes nothing else. */
  kFeedback = 5,
};

enum Flags : uint8_t {
  kFlagHmac = 1u << 0,    /* a 32-byte HMAC-SHA256 trailer follows the CRC */
  kFlagLast = 1u << 1,    /* last frame of the chunk (or the only one) */
  kFlagClamped = 1u << 2, /* at least one value in this frame was clamped by the sender */
  kFlagStream = 1u << 3,  /* sender is in stream mode: execute the single row on receipt */
};
constexpr uint8_t kKnownFlags = kFlagHmac | kFlagLast | kFlagClamped | kFlagStream;

/* A FEEDBACK frame is a header, its CRC and, with a key, the HMAC: nothing more. */
constexpr size_t kFeedbackFrameSize = kHeaderSize + kCrcSize;
constexpr size_t kMaxFeedbackFrameSize = kFeedbackFrameSize + kHmacSize;

/* Wire value of "no time known". */
constexpr uint64_t kTimeNone = UINT64_MAX;

struct Header {
  Kind kind = Kind::kAction;
  uint8_t flags = 0;
  uint64_t session_id = 0;
  uint64_t seq = 0;
  uint64_t chunk_id = 0;
  uint64_t observation_time_ns = kTimeNone;
  uint64_t send_time_ns = kTimeNone;
  uint64_t step_period_ns = 0;
  uint32_t step_index = 0;  /* row of the chunk that the first payload row is */
  uint32_t chunk_steps = 0; /* rows in the whole chunk (after the sender's trimming) */
  uint16_t steps = 0;       /* rows in this frame */
  uint16_t dim = 0;         /* values per row */
};

struct Frame {
  Header header;
  std::vector<float> values; /* steps × dim, row-major */
};

enum class Error {
  kOk = 0,
  kTruncated, /* fewer bytes than the header announces */
  kTrailing,  /* more bytes than one frame */
  kBadMagic,
  kBadVersion,
  kBadKind,
  kBadFlags,     /* unknown flag bits */
  kBadReserved,  /* reserved field not zero */
  kBadDims,      /* dim/steps out of range or inconsistent with the kind */
  kBadStepRange, /* step_index + steps > chunk_steps */
  kTooLarge,     /* announced size over the receiver's limit */
  kBadCrc,
  kHmacMissing,    /* receiver has a key, frame has no HMAC */
  kHmacUnexpected, /* frame has an HMAC, receiver has no key */
  kBadHmac,
  kNonFinite, /* a payload value is NaN or infinite */
};

const char *error_name (Error e);

struct Limits {
  size_t max_frame_size = 64 * 1024;
  uint32_t max_dim = kMaxDim;
  uint32_t max_steps = kMaxSteps;
};

/* CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320, init and final xor 0xFFFFFFFF: zlib's). */
uint32_t crc32 (const uint8_t *data, size_t len, uint32_t crc = 0);

/* Size of a whole frame with @steps rows of @dim values. */
size_t frame_size (uint32_t steps, uint32_t dim, bool hmac);

/* Appends one encoded frame to @out. @values holds header.steps × header.dim floats (may be
 * nullptr when that is 0). With a non-empty @key the HMAC flag is set and the trailer added;
 * header.flags' HMAC bit is ignored. */
void encode (const Header &header, const float *values, const std::string &key,
             std::vector<uint8_t> &out);

/* Reads and checks the fixed header only: magic, version, kind, flags, reserved, dims and the
 * resulting size against @limits. Never reads past @len and allocates nothing. On success
 * *@size is the whole frame's size, so a stream reader knows how much to wait for before it
 * allocates or decodes. Needs len >= kHeaderSize (kTruncated otherwise). */
Error peek_header (const uint8_t *data, size_t len, const Limits &limits, Header *header,
                   size_t *size);

/* Decodes exactly one frame occupying all of [data, data+len): header checks, size, CRC, HMAC
 * (required when @key is non-empty, refused when it is empty) and finiteness of every value.
 * Allocates only after the size is known to be within @limits. */
Error decode (const uint8_t *data, size_t len, const Limits &limits, const std::string &key,
              Frame *frame);

/* The splitting rule for datagram transports (docs/protocol.md, "Frames larger than a
 * datagram"): a chunk of @steps rows is sent as consecutive frames of at most this many rows.
 * Returns 0 when not even one row fits @max_frame_size. */
uint32_t rows_per_frame (uint32_t dim, bool hmac, size_t max_frame_size);

/* One JSON object (no newline) describing a message, for file/stdout targets. Floats are
 * written with 9 significant digits so a float32 survives the round trip; non-finite values
 * (which the sink never sends) would be written as null. */
std::string to_json (const Header &header, const float *values, const std::string &model_id);

const char *kind_name (Kind k);

/* Cuts a byte stream (the robot's side of a TCP connection) into candidate frames of at most
 * @max_frame bytes: a header that passes peek_header, then exactly the size it announces. Bytes
 * that cannot start such a frame are skipped up to the next magic (docs/protocol.md, "FEEDBACK
 * on the wire"): the stream resynchronises instead of being closed, so a robot that writes
 * something else back costs skipped bytes, never the connection. Memory is bounded by
 * @max_frame plus one push. No I/O. */
class FrameStream
{
public:
  explicit FrameStream (size_t max_frame) : max_frame_ (max_frame) {}
  /* Appends @len bytes and calls @frame for every candidate frame now complete, in order. */
  template <typename F> void push (const uint8_t *data, size_t len, F &&frame)
  {
    buf_.insert (buf_.end (), data, data + len);
    size_t off = 0, size = 0;
    while (next (off, &size)) {
      frame (buf_.data () + off, size);
      off += size;
    }
    buf_.erase (buf_.begin (), buf_.begin () + (long)off);
  }
  /* Forgets a partial frame (a new connection). */
  void clear ()
  {
    buf_.clear ();
    skipping_ = false;
  }
  /* Runs of bytes skipped to find a frame, since construction. */
  uint64_t resyncs () const { return resyncs_; }
  size_t buffered () const { return buf_.size (); }

private:
  /* From @off on: true with *size when a whole candidate frame starts at @off (after skipping
   * what cannot start one, which moves @off); false when more bytes are needed. */
  bool next (size_t &off, size_t *size);

  size_t max_frame_;
  std::vector<uint8_t> buf_;
  uint64_t resyncs_ = 0;
  bool skipping_ = false; /* in a run of skipped bytes */
};

} // namespace pi0::proto
