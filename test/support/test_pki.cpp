#include "support/test_pki.h"

#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

namespace gdw::test {
namespace {

std::string openssl(std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  auto r = run_command(args, 30s);
  return r.exit_code == 0 ? "" : "openssl " + args[1] + " failed: " + r.err;
}

std::string self_signed_ca(const std::string& dir, const std::string& name) {
  return openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days",
                  "1", "-subj", "/CN=" + name, "-keyout", dir + "/" + name + ".key", "-out", dir + "/" + name + ".crt"});
}

// A key and a certificate `name` signed by CA `ca`, with the extensions in `ext`.
std::string signed_by(const std::string& dir, const std::string& ca, const std::string& name, const std::string& ext) {
  const std::string base = dir + "/" + name;
  write_file(base + ".ext", ext);
  if (auto e = openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                        "/CN=" + name, "-keyout", base + ".key", "-out", base + ".csr"});
      !e.empty())
    return e;
  return openssl({"x509", "-req", "-in", base + ".csr", "-CA", dir + "/" + ca + ".crt", "-CAkey", dir + "/" + ca + ".key",
                  "-CAcreateserial", "-days", "1", "-extfile", base + ".ext", "-out", base + ".crt"});
}

}  // namespace

std::string make_test_pki(const std::string& dir, TestPki& out) {
  const std::string server_ext =
      "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
  const std::string client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
  for (auto e : {self_signed_ca(dir, "ca"), self_signed_ca(dir, "rogue-ca"), signed_by(dir, "ca", "server", server_ext),
                 signed_by(dir, "ca", "client", client_ext), signed_by(dir, "rogue-ca", "rogue", client_ext)})
    if (!e.empty()) return e;
  out = {dir + "/ca.crt",     dir + "/server.crt", dir + "/server.key", dir + "/client.crt",
         dir + "/client.key", dir + "/rogue.crt",  dir + "/rogue.key"};
  return "";
}

}  // namespace gdw::test
