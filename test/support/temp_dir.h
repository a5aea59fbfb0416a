// A temporary directory removed (recursively) when the test ends, pass or fail.
#pragma once

#include <string>

namespace gdw::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "gdw-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }
  // Writes a file (creating parent directories) and returns its absolute path.
  std::string write(const std::string& rel, const std::string& content) const;
  std::string mkdirs(const std::string& rel) const;

 private:
  std::string path_;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);
void make_dirs(const std::string& path);
void remove_tree(const std::string& path);

}  // namespace gdw::test
