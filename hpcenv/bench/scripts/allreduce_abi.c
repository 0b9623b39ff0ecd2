/* One 64 MiB-class MPI_Allreduce timing, for the bench's ABI-vs-native rows (hpcenv/bench/mpiabi.py).
 * The same source is compiled twice with one MPI: `mpicc` (its native ABI, libmpi.so.12) and
 * `mpicc_abi` (the MPI-5 standard ABI, libmpi_abi.so.1). Rank 0 prints one JSON line.
 *   allreduce_abi BYTES ITERS    (BYTES 0: MPI_Init and MPI_Finalize only) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1, len = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(library, &len);
    char *newline = strchr(library, '\n');
    if (newline) *newline = '\0';
    for (char *c = library; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';
    long bytes = argc > 1 ? atol(argv[1]) : 0;
    int iters = argc > 2 ? atoi(argv[2]) : 0;
    long n = bytes / (long)sizeof(float);
    double seconds = 0.0;
    long wrong = 0;
    if (n > 0 && iters > 0) {
        float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
        if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
        for (long i = 0; i < n; i++) in[i] = (float)(rank + 1);
        MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < iters; k++)
            MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        seconds = (MPI_Wtime() - t0) / iters;
        float expect = (float)size * (size + 1) / 2;
        for (long i = 0; i < n; i++) wrong += out[i] != expect;
        free(in);
        free(out);
    }
    long wrong_all = 0;
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double busbw = seconds > 0 ? 2.0 * (size - 1) / size * (double)bytes / seconds / 1e9 : 0;
        printf("{\"ranks\": %d, \"bytes\": %ld, \"iters\": %d, \"seconds\": %.9f, "
               "\"busbw_GBps\": %.6f, \"mismatches\": %ld, \"library\": \"%s\"}\n",
               size, bytes, iters, seconds, busbw, wrong_all, library);
    }
    MPI_Finalize();
    return 0;
}
