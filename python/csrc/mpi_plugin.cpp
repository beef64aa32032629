// The Open MPI transport, loaded on demand: libpgsparse_mpi (the only
// library that links Open MPI) is opened the first time a process group
// takes the MPI transport, so a torchrun user on gloo needs no libmpi.
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#include "status.hpp"
#include "transports.hpp"

extern "C" {
#include <pg_sparse/mpi_world.h>
}

namespace pg_sparse {

namespace {

struct MpiPlugin {
  std::once_flag once;
  std::string error;  // why it could not be loaded, if it could not
  void* handle = nullptr;
  pgs_mpi_world_create_fn create = nullptr;
  pgs_mpi_world_finalize_fn finalize = nullptr;
  pgs_mpi_cuda_aware_fn cuda_aware = nullptr;
};

MpiPlugin& plugin_state() {
  static MpiPlugin p;
  return p;
}

// The folder of this module: the plugin is built and installed beside it.
std::string module_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_dir), &info) == 0 ||
      info.dli_fname == nullptr)
    return "";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

void load(MpiPlugin& p) {
  const std::string path = module_dir() + "libpgsparse_mpi.so";
  // RTLD_GLOBAL: Open MPI opens its own components later, and they need
  // libmpi's symbols in the global scope.
  p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (p.handle == nullptr) {
    const char* why = dlerror();
    p.error = std::string(
                  "pg_sparse: the Open MPI transport could not be "
                  "loaded (") +
              (why ? why : path) +
              "); install Open MPI 4 (libopenmpi3 on Debian), or launch "
              "with torchrun, which uses gloo";
    return;
  }
  p.create = reinterpret_cast<pgs_mpi_world_create_fn>(
      dlsym(p.handle, "pgs_mpi_world_create"));
  p.finalize = reinterpret_cast<pgs_mpi_world_finalize_fn>(
      dlsym(p.handle, "pgs_mpi_world_finalize"));
  p.cuda_aware = reinterpret_cast<pgs_mpi_cuda_aware_fn>(
      dlsym(p.handle, "pgs_mpi_cuda_aware"));
  if (!p.create || !p.finalize || !p.cuda_aware)
    p.error = "pg_sparse: " + path + " lacks the pgs_mpi_world functions";
}

const MpiPlugin& plugin() {
  auto& p = plugin_state();
  std::call_once(p.once, [&p] { load(p); });
  TORCH_CHECK(p.error.empty(), p.error);
  return p;
}

// @p ncomms transports over one MPI communicator of the group.
std::vector<pgs_comm_t*> create(const std::vector<int64_t>& global_ranks,
                                int group_rank, int group_size, pgs_mem_t mem,
                                int ncomms) {
  const auto& p = plugin();
  // The default group comes without a rank list: it is the whole world.
  TORCH_CHECK(global_ranks.empty() ||
                  static_cast<int>(global_ranks.size()) == group_size,
              "pg_sparse: group of ", group_size, " ranks but ",
              global_ranks.size(), " global ranks");
  std::vector<pgs_comm_t*> comms(ncomms, nullptr);
  char err[512] = "";
  int st =
      p.create(global_ranks.empty() ? nullptr : global_ranks.data(), group_size,
               group_rank, mem, ncomms, comms.data(), err, sizeof(err));
  check(st, "creating the Open MPI transport", err);
  return comms;
}

}  // namespace

pgs_comm_t* make_mpi_comm(const std::vector<int64_t>& global_ranks,
                          int group_rank, int group_size, pgs_mem_t mem) {
  return create(global_ranks, group_rank, group_size, mem, 1)[0];
}

int mpi_cuda_aware() { return plugin().cuda_aware(); }

Transport make_mpi_transport(std::vector<int64_t> global_ranks, int group_rank,
                             int group_size) {
  auto comms = create(global_ranks, group_rank, group_size, PGS_MEM_HOST, 2);
  return Transport{CommHandle(comms[0], pgs_comm_destroy),
                   CommHandle(comms[1], pgs_comm_destroy)};
}

void finalize_mpi() {
  auto& p = plugin_state();
  // Only if a transport loaded it: never load Open MPI just to finalise.
  if (p.handle != nullptr && p.finalize != nullptr) p.finalize();
}

}  // namespace pg_sparse
