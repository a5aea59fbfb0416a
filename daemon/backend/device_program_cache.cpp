#include "backend/device_program_cache.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/device_programs_v2_kernel.h"

namespace gdw {
namespace {

int load_program(const BpfCode& code, std::string* log) {
  struct bpf_prog_load_opts opts {};
  opts.sz = sizeof(opts);
  opts.expected_attach_type = BPF_CGROUP_DEVICE;
  if (log) {
    opts.log_level = 1;
    opts.log_buf = log->data();
    opts.log_size = static_cast<std::uint32_t>(log->size());
  }
  return bpf_prog_load(BPF_PROG_TYPE_CGROUP_DEVICE, kOurProgramName, "GPL", code.data(),
                       static_cast<std::size_t>(code.size()), &opts);
}

Result<int> load_wrapper(const BpfCode& code, const std::string& dir, std::uint32_t old_id) {
  const int fd = load_program(code, nullptr);
  if (fd >= 0) return fd;
  const int err = errno;
  // Load again with the verifier's log, only to say why.
  std::string log(64 * 1024, '\0');
  if (const int again = load_program(code, &log); again >= 0) return again;
  std::string verifier(log.c_str());
  if (verifier.size() > 600) verifier = "..." + verifier.substr(verifier.size() - 600);
  return Error{"loading the device program wrapping program " + std::to_string(old_id) + " of " + dir + " (" +
               std::to_string(code.size()) + " instructions): " + errno_text(err) +
               (verifier.empty() ? "" : " (verifier: " + verifier + ")")};
}

// The cache key of a wrapper: the devices it adds and the code it wraps, as bytes.
std::string wrapper_key(const std::string& packed_added, const BpfCode& inner) {
  std::string key;
  key.reserve(packed_added.size() + 1 + inner.size() * sizeof(bpf_insn));
  key.append(packed_added);
  key.push_back('|');
  key.append(reinterpret_cast<const char*>(inner.data()), inner.size() * sizeof(bpf_insn));
  return key;
}

std::uint32_t program_id(int fd) {
  bpf_prog_info info{};
  std::uint32_t len = sizeof(info);
  return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

}  // namespace

template <class Key, class Value>
Value* DeviceProgramCache::Lru<Key, Value>::find(const Key& key) {
  auto it = index.find(key);
  if (it == index.end()) return nullptr;
  order.splice(order.begin(), order, it->second);
  return &it->second->second;
}

template <class Key, class Value>
std::vector<Value> DeviceProgramCache::Lru<Key, Value>::add(Key key, Value value, std::size_t max) {
  order.emplace_front(key, std::move(value));
  index[std::move(key)] = order.begin();
  std::vector<Value> out;
  while (index.size() > max) {
    index.erase(order.back().first);
    out.push_back(std::move(order.back().second));
    order.pop_back();
  }
  return out;
}

template <class Key, class Value>
void DeviceProgramCache::Lru<Key, Value>::erase(const Key& key) {
  auto it = index.find(key);
  if (it == index.end()) return;
  order.erase(it->second);
  index.erase(it);
}

DeviceProgramCache::~DeviceProgramCache() {
  for (const auto& [key, copies] : wrappers_.order)
    for (const auto& c : copies) ::close(c->fd);
}

std::optional<AttachedDeviceProgram> DeviceProgramCache::describe(std::uint32_t id) {
  if (const AttachedDeviceProgram* known = programs_.find(id)) return *known;
  auto read = v2_kernel::read_program(id);
  if (!read) return read;
  const bool inner_is_code = !read->inner.empty() && &read->inner.get() == &read->code.get();
  read->code = instructions_.intern(std::move(read->code));
  read->inner = inner_is_code ? read->code : instructions_.intern(std::move(read->inner));
  AttachedDeviceProgram kept = *read;
  kept.fd.reset();  // the caller's look holds it; the cache holds no program loaded
  programs_.add(id, std::move(kept), max_programs_);
  return read;
}

void DeviceProgramCache::forget_program(std::uint32_t id) { programs_.erase(id); }

void DeviceProgramCache::seen_attached(const std::string& dir, const std::vector<std::uint32_t>& ids,
                                       Clock::time_point now) {
  std::vector<std::uint32_t>* last = nullptr;  // refilled in place: no allocation per query
  for (std::uint32_t id : ids) {
    if (auto it = copy_by_id_.find(id); it != copy_by_id_.end()) {
      it->second->seen[dir] = now;
      if (!last) {
        last = &copies_last_seen_[dir];
        last->clear();
      }
      last->push_back(id);
    }
  }
  if (!last && !copies_last_seen_.empty()) copies_last_seen_.erase(dir);
}

void DeviceProgramCache::assume_still_attached(const std::string& dir, Clock::time_point now) {
  auto last = copies_last_seen_.find(dir);
  if (last == copies_last_seen_.end()) return;
  for (std::uint32_t id : last->second)
    if (auto it = copy_by_id_.find(id); it != copy_by_id_.end()) it->second->seen[dir] = now;
}

void DeviceProgramCache::forget(const Copies& copies) {
  for (const auto& c : copies) {
    copy_by_id_.erase(c->id);
    ::close(c->fd);
  }
}

std::optional<DeviceProgramCache::Wrapper> DeviceProgramCache::unseen_copy(const std::string& key,
                                                                           const std::vector<WantedDevice>& added,
                                                                           const BpfCode& inner, const std::string& dir,
                                                                           Clock::time_point now) {
  Copies* copies = wrappers_.find(key);
  if (!copies) return std::nullopt;
  for (const auto& c : *copies) {
    if (c->one_shot) {  // the last: every kept copy was in `dir` lately
      const int fd = c->fd;
      const std::uint32_t id = c->id;
      copy_by_id_.erase(id);
      copies->pop_back();
      want_spare(key, *copies, added, inner, dir, now);
      return used_once(fd, id);
    }
    prune_seen(*c, now);
    if (auto it = c->seen.find(dir); it == c->seen.end() || now - it->second >= kReuseAfter) {
      c->seen[dir] = now;
      want_spare(key, *copies, added, inner, dir, now);
      return Wrapper{c->fd, c->id, nullptr};
    }
  }
  return std::nullopt;
}

Result<DeviceProgramCache::Wrapper> DeviceProgramCache::wrapper(const std::vector<WantedDevice>& added,
                                                                const BpfCode& inner, const std::string& dir,
                                                                std::uint32_t old_id, Clock::time_point now) {
  std::string key = wrapper_key(packed_device_set(added), inner);
  if (load_thread_.started()) {
    adopt_off_loop();
    if (!wrappers_.index.count(key) && load_thread_.has(key)) {
      if (load_thread_.take_over(key, kWaitForLoadThread)) adopt_off_loop();
      if (!load_thread_.has(key)) off_loop_inner_.erase(key);  // taken out of the queue: loaded here
    }
  }
  if (auto copy = unseen_copy(key, added, inner, dir, now)) return *copy;
  Copies* copies = wrappers_.find(key);
  auto loaded = load_wrapper(wrap_device_program(added, inner), dir, old_id);
  if (!loaded) return loaded.error();
  ++wrapper_loads_;
  const std::uint32_t id = program_id(*loaded);
  if (copies && copies->size() >= kMaxCopies) {
    // Every copy was in this cgroup lately: this one is used once and not kept (and the
    // next such re-apply finds one loaded ahead).
    want_spare(key, *copies, added, inner, dir, now);
    const int fd = *loaded;
    return used_once(fd, id);
  }
  auto copy = kept_copy(*loaded, id);
  copy->seen[dir] = now;
  if (copies) {
    copies->push_back(std::move(copy));
    want_spare(key, *copies, added, inner, dir, now);
  } else {
    spares_due_.try_emplace(key, SpareDue{added, inner});  // its only copy is seen now
    // Which wrappers to load ahead for `inner` is decided after the grant (load_spares).
    add_first_copy(std::move(key), std::move(copy), &inner);
  }
  return Wrapper{*loaded, id, nullptr};
}

Result<int> DeviceProgramCache::load_on_thread(const BpfCode& code, const std::string& what) {
  return load_wrapper(code, what, 0);
}

bool DeviceProgramCache::load_off_loop(const std::vector<WantedDevice>& added, const BpfCode& inner,
                                       Clock::time_point now) {
  std::string key = wrapper_key(packed_device_set(added), inner);
  if (wrappers_.index.count(key) || load_thread_.has(key)) return false;
  if (off_loop_budget_.acquire(now) != Clock::duration::zero()) return false;
  if (!load_thread_.submit(key, wrap_device_program(added, inner), "a wrapper loaded while a runtime applies"))
    return false;
  off_loop_inner_[std::move(key)] = inner;
  return true;
}

std::size_t DeviceProgramCache::adopt_off_loop() {
  if (!load_thread_.started()) return 0;  // nothing to take, and no lock to take for it
  std::size_t kept = 0;
  for (auto& done : load_thread_.take_done()) {
    auto inner = off_loop_inner_.extract(done.key);
    // One that did not load is no repair's error: the grant that needs it loads it on its
    // path and reports why not.
    if (!done.fd.ok()) continue;
    if (inner.empty()) {  // not asked for by this cache: cannot happen, nothing leaks
      ::close(*done.fd);
      continue;
    }
    ++off_loop_loads_;
    if (keep_loaded(std::move(done.key), *done.fd, inner.mapped())) ++kept;
  }
  return kept;
}

bool DeviceProgramCache::keep_loaded(std::string key, int fd, const BpfCode& inner) {
  if (Copies* copies = wrappers_.find(key)) {
    if (copies->size() >= kMaxCopies) {
      ::close(fd);
      return false;
    }
    copies->push_back(kept_copy(fd, program_id(fd)));
    return true;
  }
  // As for a wrapper loaded on a repair's path: those of `inner` for the other sets, ahead.
  add_first_copy(std::move(key), kept_copy(fd, program_id(fd)), &inner);
  return true;
}

void DeviceProgramCache::add_first_copy(std::string key, std::unique_ptr<Copy> copy, const BpfCode* met) {
  Copies copies;
  copies.push_back(std::move(copy));
  ahead_due_.erase(key);
  for (const auto& dropped : wrappers_.add(std::move(key), std::move(copies), max_wrappers_)) forget(dropped);
  if (met && programs_met_.size() < kMaxAheadDue) programs_met_.push_back(*met);
}

void DeviceProgramCache::want_ahead(const BpfCode& inner) {
  for (const auto& set : wanted_sets_.most_wanted(kMaxAhead)) {
    if (ahead_due_.size() >= kMaxAheadDue) return;
    std::string key = wrapper_key(set, inner);
    if (wrappers_.index.count(key) || ahead_due_.count(key)) continue;
    ahead_due_.emplace(std::move(key), SpareDue{unpacked_device_set(set), inner});
  }
}

bool DeviceProgramCache::load_one_ahead() {
  while (!ahead_due_.empty()) {
    auto due = ahead_due_.extract(ahead_due_.begin());
    if (wrappers_.index.count(due.key())) continue;  // a repair loaded it meanwhile
    // Like a spare, one that does not load is no repair's error: a repair that needs it
    // loads it then and reports why not. One verifier run per call either way.
    auto fd = load_wrapper(wrap_device_program(due.mapped().added, due.mapped().inner), "a wrapper loaded ahead", 0);
    if (!fd) return false;
    ++wrapper_loads_;
    add_first_copy(std::move(due.key()), kept_copy(*fd, program_id(*fd)), nullptr);
    return true;
  }
  return false;
}

DeviceProgramCache::Wrapper DeviceProgramCache::used_once(int fd, std::uint32_t id) {
  return Wrapper{fd, id, std::shared_ptr<void>(nullptr, [fd](void*) { ::close(fd); })};
}

std::unique_ptr<DeviceProgramCache::Copy> DeviceProgramCache::kept_copy(int fd, std::uint32_t id) {
  auto copy = std::make_unique<Copy>();
  *copy = Copy{fd, id, {}};
  copy_by_id_[copy->id] = copy.get();
  return copy;
}

std::size_t DeviceProgramCache::cgroups_remembered() const {
  std::size_t n = 0;
  for (const auto& [key, copies] : wrappers_.order)
    for (const auto& c : copies) n += c->seen.size();
  return n;
}

void DeviceProgramCache::prune_seen(Copy& copy, Clock::time_point now) {
  if (copy.seen.size() < copy.prune_at) return;
  std::erase_if(copy.seen, [&](const auto& kv) { return now - kv.second >= kReuseAfter; });
  copy.prune_at = std::max(kPruneSeenAt, 2 * copy.seen.size());
}

void DeviceProgramCache::want_spare(const std::string& key, const Copies& copies,
                                    const std::vector<WantedDevice>& added, const BpfCode& inner,
                                    const std::string& dir, Clock::time_point now) {
  if (spares_due_.count(key)) return;
  if (kept_copies(copies) < kMaxCopies) {
    if (std::any_of(copies.begin(), copies.end(), [](const auto& c) { return c->seen.empty(); })) return;
  } else {
    if (copies.back()->one_shot) return;
    const auto free_in_dir = [&](const auto& c) {
      const auto it = c->seen.find(dir);
      return it == c->seen.end() || now - it->second >= kReuseAfter;
    };
    if (std::any_of(copies.begin(), copies.end(), free_in_dir)) return;
  }
  spares_due_.emplace(key, SpareDue{added, inner});
}

std::size_t DeviceProgramCache::load_spares(Clock::time_point now) {
  for (const auto& inner : programs_met_) want_ahead(inner);
  programs_met_.clear();
  std::size_t loaded = 0;
  auto due = std::move(spares_due_);
  spares_due_.clear();
  for (auto& [key, spare] : due) {
    Copies* copies = wrappers_.find(key);
    if (!copies || copies->back()->one_shot) continue;  // dropped meanwhile, or its one-shot copy waits
    // Every copy kept: a one-shot one (want_spare() asked for it).
    const bool one_shot = copies->size() >= kMaxCopies;
    if (!one_shot) {
      for (const auto& c : *copies)
        std::erase_if(c->seen, [&](const auto& kv) { return now - kv.second >= kReuseAfter; });
      if (std::any_of(copies->begin(), copies->end(), [](const auto& c) { return c->seen.empty(); })) continue;
    }
    // A spare that does not load is no error of any repair: the next one that needs a copy
    // loads it then, and reports that.
    auto fd = load_wrapper(wrap_device_program(spare.added, spare.inner), "a spare", 0);
    if (!fd) continue;
    ++wrapper_loads_;
    copies->push_back(kept_copy(*fd, program_id(*fd)));
    copies->back()->one_shot = one_shot;
    ++loaded;
  }
  return loaded + (load_one_ahead() ? 1 : 0);
}

}  // namespace gdw
