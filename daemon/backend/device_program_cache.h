// What a repair on cgroup v2 would otherwise read and build again at every event:
// - a device program's description (name, owner, translated instructions, what a wrapper
//   of ours wraps and adds). A program never changes while it exists and the kernel does
//   not reuse its id while the daemon runs (ids count up to 2^31), so it is read once by id:
//   three bpf() calls saved per program per look.
// - our wrapper for a given original and set of devices, loaded once. A re-applier that
//   applies the same spec again attaches a program with the same instructions, whose
//   wrapper is already loaded: the repair attaches it without a verifier run, and
//   containers with the same devices share it.
//
// A wrapper is never attached to a cgroup where it was seen in the last kReuseAfter: a
// re-applier that records a cgroup's programs, attaches its own and then detaches the
// recorded ones (runc) may hold an id we took away and would attach again, and would then
// detach what the repair put in, and with it the program it had just attached, which the
// wrapper replaced. runc does all three within one run, milliseconds apart; kReuseAfter
// leaves a run stalled on a loaded node ample time. So a wrapper has copies (kMaxCopies,
// loaded as needed: one per repair of the same cgroup within kReuseAfter); past those a
// copy is used once and not kept. A copy loaded while a repair waits costs the reaction a
// verifier run (~0.5 ms), so once a repair has taken the last copy no cgroup has seen, a
// spare is loaded after the repair (load_spares(), while kMaxCopies allows): the next
// repair that needs one finds it loaded. Past kMaxCopies, once a cgroup has had every
// kept copy within kReuseAfter (a container re-applied that often), the one-shot copy its
// next repair will take is loaded after this one (one per wrapper at most).
//
// A runtime applies the same spec to most containers, so the program a re-apply attaches
// has the same instructions in every container it hits; only the devices each wrapper adds
// differ. The first repair that meets such a program runs the verifier on its path; after
// it, wrappers of that program for the other device sets the node's GPU containers want
// (WantedDeviceSets, fed by every look) are loaded ahead, one per call of load_spares():
// a daemon-reload or a runtime update that reaches every GPU container then costs one
// verifier run on a reaction's path, not one per device set. Bounded: kMaxAhead sets per
// program met, kMaxAheadDue waiting in all. Both caches are bounded (least recently used go
// first; a description is about 2 KiB, 256 cover the programs of a hundred GPU
// containers). A wrapper dropped from the cache stays loaded while it is attached
// somewhere (the kernel holds it), and is freed after.
//
// The first repair after a runtime attached a program never met would still run the
// verifier on its path: while the runtime applies (its grant waits for its exit), the
// wrapper is loaded on a thread of its own (load_off_loop(), ProgramLoadThread), and the
// grant takes it (or waits for the load under way, at most kWaitForLoadThread).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/device_programs_v2.h"
#include "backend/program_load_thread.h"
#include "backend/wanted_device_sets.h"
#include "core/clock.h"
#include "core/repair_policy.h"
#include "core/result.h"

namespace gdw {

class DeviceProgramCache {
 public:
  static constexpr Clock::duration kReuseAfter = std::chrono::seconds(10);
  static constexpr std::size_t kMaxCopies = 8;
  static constexpr std::size_t kMaxAhead = 32;     // device sets loaded ahead per program met
  static constexpr std::size_t kMaxAheadDue = 64;  // wrappers waiting to be loaded ahead
  // A grant that needs the wrapper the load thread is loading waits this long for it: the
  // thread started earlier than the grant could (a verifier run is ~0.5 ms).
  static constexpr std::chrono::microseconds kWaitForLoadThread{1000};
  // Loads off the loop, node-wide: a writer named like a runtime inside a container (a
  // tenant's process may be) that attaches a new program again and again gets at most this
  // many verifier runs of the daemon's at once, then 100 a second (~5 % of a CPU here).
  static constexpr std::uint32_t kOffLoopBurst = 8;
  static constexpr std::uint32_t kOffLoopPerMinute = 6000;

  explicit DeviceProgramCache(std::size_t max_programs = 256, std::size_t max_wrappers = 512)
      : max_programs_(max_programs),
        max_wrappers_(max_wrappers),
        instructions_(2 * max_programs),
        load_thread_(&DeviceProgramCache::load_on_thread) {}
  ~DeviceProgramCache();
  DeviceProgramCache(const DeviceProgramCache&) = delete;
  DeviceProgramCache& operator=(const DeviceProgramCache&) = delete;

  // Program `id` described (subgroup and link are the caller's to set); nullopt when it is
  // gone.
  std::optional<AttachedDeviceProgram> describe(std::uint32_t id);
  // Program `id` was replaced or detached by a repair: its description is of no more use
  // (a runtime's program is freed then; nobody attaches a detached one again).
  void forget_program(std::uint32_t id);
  // A query of cgroup `dir` found these program ids attached: which of our wrappers were
  // there, when (every query goes through here).
  void seen_attached(const std::string& dir, const std::vector<std::uint32_t>& ids, Clock::time_point now);
  // Before a grant from a look that did not query `dir` (observe_attached): the copies the
  // last query of `dir` found there are taken as still there, however long ago that was,
  // so that none of them is handed out for it (the kernel refuses a program twice in one
  // cgroup). The grant's own query tells again.
  void assume_still_attached(const std::string& dir, Clock::time_point now);
  // Cgroup `dir` is no longer watched.
  void forget_cgroup(const std::string& dir) { copies_last_seen_.erase(dir); }

  // Our wrapper adding `added` to `inner`, loaded, to attach to cgroup `dir` now: a copy
  // not seen there in the last kReuseAfter. The fd is valid until the next call (or, for a
  // copy past kMaxCopies, owned by `Wrapper::owned`). The error names `dir` and `old_id`
  // (the program it is for) and the verifier's words.
  struct Wrapper {
    int fd = -1;
    std::uint32_t id = 0;
    std::shared_ptr<void> owned;  // a copy the cache does not keep: closed with the last Wrapper
  };
  Result<Wrapper> wrapper(const std::vector<WantedDevice>& added, const BpfCode& inner, const std::string& dir,
                          std::uint32_t old_id, Clock::time_point now);

  // The device sets the node's GPU containers want (every look says what its container
  // wants; a container gone is forgotten): whose wrappers are loaded ahead.
  WantedDeviceSets& wanted_sets() { return wanted_sets_; }

  // Off the reaction's path (after a repair's grant): loads the spare copies that wrapper()
  // found missing since the last call, and one wrapper due ahead (a verifier run each, so
  // that an event arriving meanwhile waits for one at most); returns how many were loaded.
  std::size_t load_spares(Clock::time_point now);
  // While a runtime applies: the wrapper adding `added` to `inner` loaded on the load
  // thread, unless it is loaded, on its way, the thread has kMaxQueued to do, or more than
  // kOffLoopBurst were asked for lately (kOffLoopPerMinute after those). Whether it was
  // asked for.
  bool load_off_loop(const std::vector<WantedDevice>& added, const BpfCode& inner, Clock::time_point now);
  // The wrappers the load thread has loaded since the last call, kept as copies unseen
  // anywhere (wrapper() takes them too); how many.
  std::size_t adopt_off_loop();
  std::size_t off_loop_loads() const { return off_loop_loads_; }  // adopted so far

  // Whether load_spares() has anything to load.
  bool spares_due() const { return !spares_due_.empty() || !programs_met_.empty() || !ahead_due_.empty(); }

  std::size_t programs() const { return programs_.size(); }
  std::size_t wrappers() const { return wrappers_.size(); }
  std::size_t wrapper_loads() const { return wrapper_loads_; }  // verifier runs so far
  // The cgroups the kept copies remember being handed to or seen in (Copy::seen), all told.
  std::size_t cgroups_remembered() const;
  // Wrappers due ahead (counted once load_spares() has looked at the programs met).
  std::size_t ahead_due() const { return ahead_due_.size(); }

 private:
  // Least recently used first out.
  template <class Key, class Value>
  struct Lru {
    std::list<std::pair<Key, Value>> order;  // most recently used first
    std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator> index;
    Value* find(const Key& key);  // and marks it used
    // Adds (key, value); returns the values pushed out beyond `max`.
    std::vector<Value> add(Key key, Value value, std::size_t max);
    void erase(const Key& key);
    std::size_t size() const { return index.size(); }
  };
  // One loaded copy of a wrapper, and where it was seen attached last.
  struct Copy {
    int fd = -1;
    std::uint32_t id = 0;
    std::unordered_map<std::string, Clock::time_point> seen;  // cgroup dir → when
    std::size_t prune_at = kPruneSeenAt;                      // prune_seen()
    // Loaded ahead past kMaxCopies (want_spare()): handed out once, to any cgroup, and not
    // kept. Always the last of its wrapper's copies, one at most.
    bool one_shot = false;
  };
  // The cgroups of containers long gone must not pile up in `seen`, but a repair should
  // not walk it either: it is pruned of what is older than kReuseAfter once it has doubled
  // since the last time (amortized O(1) per hand-out; load_spares() prunes too).
  static constexpr std::size_t kPruneSeenAt = 64;
  static void prune_seen(Copy& copy, Clock::time_point now);
  using Copies = std::vector<std::unique_ptr<Copy>>;
  void forget(const Copies& copies);
  // After `copies` (of `key`) handed one out to `dir`: a spare is due when no copy is unseen.
  // Entries older than kReuseAfter still count here (pruning is amortized): load_spares()
  // prunes every copy of the key and asks again before it loads anything. With kMaxCopies
  // kept, a one-shot copy is due instead when every one of them was in `dir` lately: its
  // next re-apply within kReuseAfter would otherwise load one on its repair's path.
  void want_spare(const std::string& key, const Copies& copies, const std::vector<WantedDevice>& added,
                  const BpfCode& inner, const std::string& dir, Clock::time_point now);
  static std::size_t kept_copies(const Copies& copies) {
    return copies.size() - (!copies.empty() && copies.back()->one_shot ? 1 : 0);
  }
  struct SpareDue {
    std::vector<WantedDevice> added;
    BpfCode inner;
  };
  // `inner` was met (a wrapper of it loaded on a repair's path for a set): wrappers of it
  // for the other sets containers want are due ahead.
  void want_ahead(const BpfCode& inner);
  // Loads one wrapper due ahead, if any; whether one was loaded.
  bool load_one_ahead();
  // Loaded program `fd` (kernel id `id`) handed out for one attach: closed with the last
  // Wrapper that holds it (the kernel keeps it while it is attached).
  static Wrapper used_once(int fd, std::uint32_t id);
  // Loaded program `fd` (kernel id `id`) as a copy the cache keeps, unseen anywhere yet.
  std::unique_ptr<Copy> kept_copy(int fd, std::uint32_t id);
  // What the load thread runs.
  static Result<int> load_on_thread(const BpfCode& code, const std::string& what);
  // A copy of `key` not seen in `dir` in the last kReuseAfter, now marked seen there.
  std::optional<Wrapper> unseen_copy(const std::string& key, const std::vector<WantedDevice>& added,
                                     const BpfCode& inner, const std::string& dir, Clock::time_point now);
  // Keeps loaded wrapper `fd` of `key` (wrapping `inner`): a copy more, a new entry, or
  // closed when kMaxCopies are kept. Whether it was kept.
  bool keep_loaded(std::string key, int fd, const BpfCode& inner);
  // `copy` as the first of `key`, new to the cache (the least recently used keys may be
  // pushed out); `met`, when set: the program it wraps was met, and wrappers of it for the
  // other wanted sets are due ahead.
  void add_first_copy(std::string key, std::unique_ptr<Copy> copy, const BpfCode* met);

  std::size_t max_programs_, max_wrappers_;
  Lru<std::uint32_t, AttachedDeviceProgram> programs_;
  // The descriptions' instructions, each distinct one once (a wrapper's inner code and its
  // original's too): a re-apply's new program is judged by what the last one answered.
  BpfCodeInterner instructions_;
  Lru<std::string, Copies> wrappers_;  // (added, inner) as bytes → its copies
  std::unordered_map<std::uint32_t, Copy*> copy_by_id_;
  // Per cgroup dir, the ids of our copies its last query found (none: no entry).
  std::unordered_map<std::string, std::vector<std::uint32_t>> copies_last_seen_;
  std::unordered_map<std::string, SpareDue> spares_due_;  // by key
  std::vector<BpfCode> programs_met_;                      // since the last load_spares()
  std::unordered_map<std::string, SpareDue> ahead_due_;   // by key: wrappers to load ahead
  WantedDeviceSets wanted_sets_;
  std::size_t wrapper_loads_ = 0;
  std::size_t off_loop_loads_ = 0;
  std::unordered_map<std::string, BpfCode> off_loop_inner_;  // by key: what the thread's loads wrap
  RepairBudget off_loop_budget_{kOffLoopBurst, kOffLoopPerMinute};
  // Last: stopped (and its fds closed) before the rest goes.
  ProgramLoadThread load_thread_;
};

}  // namespace gdw
