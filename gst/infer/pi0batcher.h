/* Batcher: when observations held for one batched forward pass run (pi0infer's max-batch-size and
 * max-batch-wait), and in which order they leave. No GStreamer, no clock, no thread: every call
 * passes the time it happens at ("now", nanoseconds on the caller's clock) and returns what is
 * due; the caller waits for deadline() on its clock and then calls expire(). The shape of
 * pi0::RtcTracker and protocol/pi0session.
 *
 * The rules (docs/elements/pi0infer.md, "Batching"):
 *  - with max_size 1 nothing is ever held (the caller runs each observation as it comes);
 *  - an observation that needs no policy (no state: it passes on without actions) goes on at
 *    once when nothing is held, else waits in its place;
 *  - the observations that need the policy are held until max_size of them are, or max_wait has
 *    passed since the first of them (max_wait 0: they never wait), or the caller takes them all
 *    (a serialized event, EOS, a flush, stop);
 *  - an in-band item (an instruction event) waits in its place while anything is held, so that it
 *    reaches downstream between the same observations;
 *  - a due batch runs those that need the policy in one pass when there are more than one; when
 *    that pass fails each runs alone (as with max_size 1), stopping at the first that fails; the
 *    items go on in input order up to that one (run_batch()).
 *
 * Not thread-safe: one owner (pi0infer: whoever holds the sink pad's stream lock). */
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pi0
{

/* The counting and the deadline of the rules above, apart from the items. */
class BatchSchedule
{
public:
  static constexpr uint64_t kNever = UINT64_MAX;

  enum class Verdict {
    PassOn, /* the observation goes on now, alone */
    Hold,   /* it waits with the others */
    Run,    /* it waits with the others, and all of them are due now */
  };

  /* A new stream of observations, @max_size (at least 1) per batch. */
  void reset (unsigned max_size);
  unsigned max_size () const { return max_size_; }

  /* An observation at @now; @infer: it needs the policy; @holding: something is held already.
   * A first one that needs the policy sets the deadline to @now + @max_wait (saturating below
   * kNever). */
  Verdict observation (bool infer, bool holding, uint64_t now, uint64_t max_wait);

  /* Everything held was taken: no deadline, no count. */
  void taken ();

  /* When the held observations are due by the clock; kNever when none waits. */
  uint64_t deadline () const { return deadline_; }

private:
  unsigned max_size_ = 1;
  unsigned n_infer_ = 0; /* held observations that need the policy */
  uint64_t deadline_ = kNever;
};

/* A held item. */
template <typename Item> struct BatchEntry {
  Item item;
  bool infer = false; /* needs the policy (false: passes on without actions, or an event) */
};

template <typename Item> class Batcher
{
public:
  static constexpr uint64_t kNever = BatchSchedule::kNever;

  using Entry = BatchEntry<Item>;
  using Batch = std::vector<Entry>; /* in input order */

  /* A new stream with @max_size observations per batch; whatever was held is returned, for the
   * caller to drop. */
  Batch reset (unsigned max_size)
  {
    Batch dropped = take ();
    schedule_.reset (max_size);
    return dropped;
  }

  /* Whether observations are ever held (max_size above 1). */
  bool batching () const { return schedule_.max_size () > 1; }
  bool empty () const { return held_.empty (); }
  size_t held () const { return held_.size (); }

  /* An observation arriving at @now (@infer: it needs the policy), with max-batch-wait
   * @max_wait. Returns what goes on now, in order: nothing (it is held), the observation alone
   * (it needs no policy and nothing is held), or every held item with it (the batch is due). */
  Batch observation (Item item, bool infer, uint64_t now, uint64_t max_wait)
  {
    const BatchSchedule::Verdict v = schedule_.observation (infer, !held_.empty (), now, max_wait);
    Batch due;
    if (v == BatchSchedule::Verdict::PassOn) {
      due.push_back (Entry{std::move (item), infer});
      return due;
    }
    held_.push_back (Entry{std::move (item), infer});
    if (v == BatchSchedule::Verdict::Run)
      due = take ();
    return due;
  }

  /* An in-band item that must keep its place between observations: held (true, @item moved
   * from) while anything is held; false (@item untouched) when nothing is, and it goes on now. */
  bool hold_in_place (Item &item)
  {
    if (held_.empty ())
      return false;
    held_.push_back (Entry{std::move (item), false});
    return true;
  }

  /* Everything held, due now (a serialized event, EOS), or dropped (a flush, stop). */
  Batch take ()
  {
    Batch due;
    due.swap (held_);
    schedule_.taken ();
    return due;
  }

  /* The held items when their deadline has come by @now; else nothing. */
  Batch expire (uint64_t now)
  {
    return deadline () != kNever && now >= deadline () ? take () : Batch ();
  }

  /* When the held items are due by the clock (the caller waits for it); kNever when nothing
   * waits. */
  uint64_t deadline () const { return schedule_.deadline (); }

private:
  BatchSchedule schedule_;
  Batch held_;
};

/* Runs a due batch: the entries that need the policy go to @together as one batch when there are
 * more than one; when there is only one, or @together returns false (the stacked pass failed),
 * each goes to @alone in order, stopping at the first for which it returns false. Returns how
 * many entries from the front may go on: all, or those before the one that failed.
 * @together: bool (std::vector<Item *> &); @alone: bool (Item &). */
template <typename Item, typename Together, typename Alone>
size_t
run_batch (std::vector<BatchEntry<Item>> &due, Together &&together, Alone &&alone)
{
  std::vector<Item *> todo;
  std::vector<size_t> where;
  for (size_t i = 0; i < due.size (); i++) {
    if (due[i].infer) {
      todo.push_back (&due[i].item);
      where.push_back (i);
    }
  }
  if (todo.size () > 1 && together (todo))
    return due.size ();
  for (size_t k = 0; k < todo.size (); k++) {
    if (!alone (*todo[k]))
      return where[k];
  }
  return due.size ();
}

} // namespace pi0
