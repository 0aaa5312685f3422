/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0::Batcher (gst/infer/pi0batcher.*), pi0infer's batching rules, without GStreamer, a clock
 * or a model (nor LibTorch to link): what is held and what goes on, when a batch is full, the max-batch-wait deadline
 * (set by the first observation that needs the policy, saturating), in-place items, taking
 * everything (events, flushes), and run_batch's fallback to one at a time. Times are passed in:
 * nothing here waits. */

#include "gst/infer/pi0batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using Batcher = pi0::Batcher<std::string>;
using Batch = Batcher::Batch;

namespace
{

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kNever = Batcher::kNever;

std::vector<std::string>
names (const Batch &b)
{
  std::vector<std::string> v;
  for (const auto &e : b)
    v.push_back (e.item);
  return v;
}

using Names = std::vector<std::string>;

} // namespace

TEST (Batcher, SizeOneNeverHolds)
{
  Batcher b;
  b.reset (1);
  EXPECT_FALSE (b.batching ());
  EXPECT_EQ (names (b.observation ("a", true, 0, 5 * kMs)), Names{"a"});
  EXPECT_EQ (names (b.observation ("b", false, 1, 5 * kMs)), Names{"b"});
  EXPECT_TRUE (b.empty ());
  EXPECT_EQ (b.deadline (), kNever);
  std::string ev = "event";
  EXPECT_FALSE (b.hold_in_place (ev));
  EXPECT_EQ (ev, "event") << "untouched when not held";
}

TEST (Batcher, HeldUntilFullThenAllInInputOrder)
{
  Batcher b;
  b.reset (3);
  EXPECT_TRUE (b.batching ());
  EXPECT_TRUE (b.observation ("1", true, 0, 10 * kMs).empty ());
  EXPECT_EQ (b.deadline (), 10 * kMs);
  EXPECT_TRUE (b.observation ("2", true, 2 * kMs, 10 * kMs).empty ());
  EXPECT_EQ (b.deadline (), 10 * kMs) << "only the first sets the deadline";
  Batch due = b.observation ("3", true, 4 * kMs, 10 * kMs);
  EXPECT_EQ (names (due), (Names{"1", "2", "3"}));
  EXPECT_TRUE (std::all_of (due.begin (), due.end (), [] (auto &e) { return e.infer; }));
  EXPECT_TRUE (b.empty ());
  EXPECT_EQ (b.deadline (), kNever);
  /* The next batch starts afresh. */
  EXPECT_TRUE (b.observation ("4", true, 50 * kMs, 10 * kMs).empty ());
  EXPECT_EQ (b.deadline (), 60 * kMs);
}

/* An observation without state passes on at once when nothing is held, else keeps its place, and
 * never counts toward the batch size. */
TEST (Batcher, ObservationsWithoutPolicyKeepTheirPlace)
{
  Batcher b;
  b.reset (2);
  EXPECT_EQ (names (b.observation ("x", false, 0, 10 * kMs)), Names{"x"});
  EXPECT_EQ (b.deadline (), kNever) << "nothing held, nothing waits";
  EXPECT_TRUE (b.observation ("1", true, 1 * kMs, 10 * kMs).empty ());
  EXPECT_TRUE (b.observation ("y", false, 2 * kMs, 10 * kMs).empty ());
  EXPECT_TRUE (b.observation ("z", false, 3 * kMs, 10 * kMs).empty ());
  EXPECT_EQ (b.held (), 3u);
  EXPECT_EQ (b.deadline (), 11 * kMs) << "set by the first that needs the policy";
  Batch due = b.observation ("2", true, 4 * kMs, 10 * kMs);
  EXPECT_EQ (names (due), (Names{"1", "y", "z", "2"}));
  EXPECT_EQ (due[1].infer, false);
  EXPECT_EQ (due[3].infer, true);
}

TEST (Batcher, InPlaceItemsWaitOnlyWhileSomethingIsHeld)
{
  Batcher b;
  b.reset (4);
  std::string ev = "event";
  EXPECT_FALSE (b.hold_in_place (ev));
  EXPECT_EQ (ev, "event");
  EXPECT_TRUE (b.observation ("1", true, 0, 10 * kMs).empty ());
  std::string ev2 = "instruction";
  EXPECT_TRUE (b.hold_in_place (ev2));
  EXPECT_TRUE (b.observation ("2", true, 1, 10 * kMs).empty ());
  EXPECT_EQ (b.held (), 3u);
  EXPECT_EQ (names (b.take ()), (Names{"1", "instruction", "2"}));
  EXPECT_EQ (b.deadline (), kNever);
}

/* The wait: nothing is due before the deadline, everything at or after it. */
TEST (Batcher, ExpireAtTheDeadline)
{
  Batcher b;
  b.reset (4);
  EXPECT_TRUE (b.expire (1000 * kMs).empty ()) << "nothing held";
  EXPECT_TRUE (b.observation ("1", true, 100 * kMs, 20 * kMs).empty ());
  EXPECT_TRUE (b.observation ("2", true, 110 * kMs, 20 * kMs).empty ());
  EXPECT_EQ (b.deadline (), 120 * kMs);
  EXPECT_TRUE (b.expire (119 * kMs).empty ());
  EXPECT_EQ (b.held (), 2u);
  EXPECT_EQ (names (b.expire (120 * kMs)), (Names{"1", "2"}));
  EXPECT_TRUE (b.empty ());
  EXPECT_TRUE (b.expire (500 * kMs).empty ()) << "a late wakeup for a batch already run";
  /* After a deadline long past, a wait for it finds the next batch's deadline in the future. */
  EXPECT_TRUE (b.observation ("3", true, 200 * kMs, 20 * kMs).empty ());
  EXPECT_TRUE (b.expire (120 * kMs).empty ());
  EXPECT_EQ (names (b.expire (220 * kMs)), Names{"3"});
}

/* max-batch-wait may change while playing: a batch keeps the deadline it got. */
TEST (Batcher, TheWaitOfABatchIsFixedByItsFirstObservation)
{
  Batcher b;
  b.reset (4);
  EXPECT_TRUE (b.observation ("1", true, 0, 50 * kMs).empty ());
  EXPECT_TRUE (b.observation ("2", true, 1 * kMs, 5 * kMs).empty ());
  EXPECT_EQ (b.deadline (), 50 * kMs);
}

TEST (Batcher, ZeroWaitRunsEachAsItComes)
{
  Batcher b;
  b.reset (8);
  EXPECT_EQ (names (b.observation ("1", true, 0, 0)), Names{"1"});
  EXPECT_EQ (b.deadline (), kNever);
  /* A held observation without state would go with the next (none is held here). */
  EXPECT_EQ (names (b.observation ("x", false, 0, 0)), Names{"x"});
}

TEST (Batcher, DeadlineSaturatesBelowNever)
{
  Batcher b;
  b.reset (2);
  EXPECT_TRUE (b.observation ("1", true, kNever - 10, 1000).empty ());
  EXPECT_EQ (b.deadline (), kNever - 1);
  b.take ();
  EXPECT_TRUE (b.observation ("2", true, 5, kNever).empty ());
  EXPECT_EQ (b.deadline (), kNever - 1);
  b.take ();
  EXPECT_TRUE (b.observation ("3", true, kNever, 1).empty ()) << "a time of 'none'";
  EXPECT_EQ (b.deadline (), kNever - 1);
  EXPECT_EQ (names (b.expire (kNever - 1)), Names{"3"});
}

TEST (Batcher, ResetReturnsWhatWasHeldAndChangesTheSize)
{
  Batcher b;
  b.reset (4);
  EXPECT_TRUE (b.observation ("1", true, 0, kMs).empty ());
  EXPECT_TRUE (b.observation ("x", false, 0, kMs).empty ());
  EXPECT_EQ (names (b.reset (2)), (Names{"1", "x"}));
  EXPECT_EQ (b.deadline (), kNever);
  EXPECT_TRUE (b.observation ("2", true, 0, kMs).empty ());
  EXPECT_EQ (names (b.observation ("3", true, 0, kMs)), (Names{"2", "3"})) << "size 2 now";
  b.reset (0);
  EXPECT_FALSE (b.batching ()) << "0 is taken as 1";
}

/* ---- run_batch: one pass for all, else one at a time up to the first failure ---- */

namespace
{

Batch
batch_of (const std::vector<std::pair<std::string, bool>> &items)
{
  Batch b;
  for (const auto &[name, infer] : items)
    b.push_back ({name, infer});
  return b;
}

} // namespace

TEST (RunBatch, ThoseThatNeedThePolicyRunTogether)
{
  Batch due = batch_of ({{"1", true}, {"x", false}, {"2", true}, {"ev", false}, {"3", true}});
  Names together, alone;
  size_t n = pi0::run_batch (
      due,
      [&] (std::vector<std::string *> &todo) {
        for (auto *s : todo)
          together.push_back (*s);
        return true;
      },
      [&] (std::string &s) {
        alone.push_back (s);
        return true;
      });
  EXPECT_EQ (n, 5u);
  EXPECT_EQ (together, (Names{"1", "2", "3"}));
  EXPECT_TRUE (alone.empty ());
}

TEST (RunBatch, AFailedPassFallsBackToOneAtATime)
{
  Batch due = batch_of ({{"1", true}, {"x", false}, {"2", true}, {"3", true}});
  int together_calls = 0;
  Names alone;
  size_t n = pi0::run_batch (
      due,
      [&] (std::vector<std::string *> &todo) {
        together_calls++;
        EXPECT_EQ (todo.size (), 3u);
        return false;
      },
      [&] (std::string &s) {
        alone.push_back (s);
        return true;
      });
  EXPECT_EQ (together_calls, 1);
  EXPECT_EQ (alone, (Names{"1", "2", "3"}));
  EXPECT_EQ (n, 4u);
}

/* One that fails alone stops the rest: the items before it go on, it and those after it do not
 * (its error is the caller's to post). */
TEST (RunBatch, TheFirstFailureAloneStopsTheRest)
{
  Batch due = batch_of ({{"1", true}, {"x", false}, {"2", true}, {"y", false}, {"3", true}});
  Names alone;
  size_t n = pi0::run_batch (
      due, [] (std::vector<std::string *> &) { return false; },
      [&] (std::string &s) {
        alone.push_back (s);
        return s != "2";
      });
  EXPECT_EQ (alone, (Names{"1", "2"})) << "3 is never tried";
  EXPECT_EQ (n, 2u) << "1 and x go on";
}

TEST (RunBatch, OneObservationRunsAloneAndNoneRunsNothing)
{
  int together_calls = 0, alone_calls = 0;
  auto together = [&] (std::vector<std::string *> &) {
    return ++together_calls, true;
  };
  auto alone = [&] (std::string &) {
    return ++alone_calls, true;
  };
  Batch one = batch_of ({{"x", false}, {"1", true}, {"ev", false}});
  EXPECT_EQ (pi0::run_batch (one, together, alone), 3u);
  EXPECT_EQ (together_calls, 0);
  EXPECT_EQ (alone_calls, 1);
  Batch none = batch_of ({{"x", false}, {"ev", false}});
  EXPECT_EQ (pi0::run_batch (none, together, alone), 2u);
  EXPECT_EQ (alone_calls, 1);
  Batch empty;
  EXPECT_EQ (pi0::run_batch (empty, together, alone), 0u);
}

/* Random sequences of observations, in-place items, clock wakeups and takes, checked against a
 * plain model of the rules: every item leaves exactly once and in input order, a batch is never
 * larger than max_size observations that need the policy, and the deadline is always the first
 * held such observation's time plus the wait it came with (a batch past its deadline stays held
 * until expire(): the caller's clock wait runs it). */
TEST (Batcher, RandomSequencesKeepOrderSizeAndDeadline)
{
  std::mt19937_64 rng (11);
  for (int round = 0; round < 2000; round++) {
    const unsigned size = 1 + rng () % 5;
    Batcher b;
    b.reset (size);
    uint64_t now = rng () % (100 * kMs);
    int next = 0;
    Names out, in;
    uint64_t first_infer_time = kNever, first_wait = 0;
    unsigned held_infer = 0;
    auto collect = [&] (Batch due) {
      unsigned n_infer = 0;
      for (auto &e : due) {
        out.push_back (e.item);
        n_infer += e.infer;
      }
      EXPECT_LE (n_infer, size);
    };
    for (int step = 0; step < 60; step++) {
      now += rng () % (4 * kMs);
      const int what = rng () % 10;
      if (what < 6) {
        const bool infer = rng () % 4 != 0;
        const uint64_t wait = rng () % 3 == 0 ? 0 : rng () % (10 * kMs);
        std::string name = std::to_string (next++);
        in.push_back (name);
        const bool was_empty = b.empty ();
        Batch due = b.observation (name, infer, now, wait);
        if (infer && held_infer == 0) {
          first_infer_time = now;
          first_wait = wait;
        }
        held_infer += infer;
        const bool expect_due =
            (infer && (held_infer >= size || wait == 0)) || (!infer && was_empty);
        EXPECT_EQ (!due.empty (), expect_due);
        if (!due.empty ()) {
          held_infer = 0;
          EXPECT_TRUE (b.empty ());
        }
        collect (std::move (due));
      } else if (what < 7) {
        std::string name = "e" + std::to_string (next++);
        in.push_back (name);
        if (!b.hold_in_place (name))
          out.push_back (name);
      } else if (what < 9) {
        Batch due = b.expire (now);
        if (!due.empty ())
          held_infer = 0;
        collect (std::move (due));
      } else {
        held_infer = 0;
        collect (b.take ());
      }
      if (held_infer > 0) {
        const uint64_t expect =
            first_wait < kNever - 1 - first_infer_time ? first_infer_time + first_wait : kNever - 1;
        ASSERT_EQ (b.deadline (), expect);
      } else {
        ASSERT_EQ (b.deadline (), kNever);
      }
    }
    collect (b.take ());
    ASSERT_EQ (out, in) << "round " << round;
  }
}
