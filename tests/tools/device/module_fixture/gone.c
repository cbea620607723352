/* A library that test_cuda_module's fixture module needs and the loader cannot find (no RUNPATH
 * points at it): the "a library is missing" case of kernels/cuda_load.c. */
int lwqtest_gone(void);
int lwqtest_gone(void) { return 1; }
