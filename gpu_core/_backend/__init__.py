"""What both backends stand on: choosing one (``resolve``), telling NumPy from CuPy arrays
(``arrays``), loading the CUDA kernels (``kernels``), copies through pinned host memory
(``staging``), Numba for the host's compiled passes (``jit``) and the memory figures the
estimates give and measure (``memory``). Imports nothing of the engine
but ``errors``."""
