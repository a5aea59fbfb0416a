// The text log's sink: formatted lines to a file descriptor (stderr). Without a writer
// thread each line is one write() by the thread that logs it; with one (the daemon starts
// it), lines are handed over and written in batches.
//
// Why: a node-wide re-apply storm repairs every GPU container within milliseconds and
// each repair logs a line. Written on the event loop, one write() per line was about 8 %
// of the loop's time in such a storm (perf on bench/storm, 128 lines a storm), and each
// delays the next repair by as long as it takes (or for good, on a stderr pipe nobody
// reads). Here the loop only formats the line and hands it over; the writer thread waits
// up to `hold` after a batch's first line, then writes the batch in one call. Warnings and
// errors are written without waiting.
//
// Nothing is lost and the order is kept: lines are written in the order they were logged.
// Past kMaxPending bytes pending (beside the batch being written) a logging thread waits
// for the writer, as a direct write would.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace gdw::log {

class HeldLinesSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr std::size_t kMaxPending = 1 << 20;

  explicit HeldLinesSink(int fd) : fd_(fd) {}
  ~HeldLinesSink() override { stop_writer(); }

  // Starts the writer thread: from now on lines are handed to it and written at most
  // `hold` after the first of their batch. No-op while it runs. false: no thread could be
  // started, lines are still written by their callers.
  bool start_writer(std::chrono::microseconds hold);
  // Writes what is pending and joins the thread; lines are written directly again.
  void stop_writer();

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  void writer_main();
  void write_all(std::string_view text);

  int fd_;
  std::chrono::microseconds hold_{0};
  std::thread writer_;
  // Guarded by the base sink's mutex_ (wake_ waits on it too).
  std::condition_variable_any wake_;      // the writer: something to do
  std::condition_variable_any written_;   // a logger waiting past kMaxPending, flush()
  std::string pending_;
  bool writer_running_ = false;
  bool stopping_ = false;
  bool writer_idle_ = false;    // the writer waits for a batch's first line
  bool urgent_ = false;         // write without holding (a warning, flush(), past kMaxPending)
  std::uint64_t batches_taken_ = 0;    // batches the writer took out of pending_
  std::uint64_t batches_written_ = 0;  // ... and has written
};

}  // namespace gdw::log
