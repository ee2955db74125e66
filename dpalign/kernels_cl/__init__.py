"""OpenCL C kernels (``*.cl``) and the thin pyopencl host code that builds and launches them."""
