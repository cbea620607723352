/* A module file that needs liblwqtest_gone.so (test_cuda_module: the loader must name that
 * library when it cannot be found). */
int lwqtest_gone(void);
int lwqtest_calls_gone(void);
int lwqtest_calls_gone(void) { return lwqtest_gone(); }
