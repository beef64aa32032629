"""Worker scripts that the tests launch under torchrun and mpirun."""
