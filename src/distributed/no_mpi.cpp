// ember::distributed in a build without MPI: the API links, and init() says why it cannot run.
#include "distributed/backend.h"

namespace ember::distributed {

bool built_with_mpi() { return false; }

std::unique_ptr<World> make_mpi_world() {
  EMBER_FAIL("distributed init: ember was built without MPI, which it needs to start and "
             "connect processes; install Open MPI (apt-get install openmpi-bin "
             "libopenmpi-dev, or scripts/setup.sh) and configure ember again");
}

}  // namespace ember::distributed
