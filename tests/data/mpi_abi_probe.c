/* Compiled ONCE against the MPI-5 standard ABI (mpicc_abi: mpi_abi.h, links libmpi_abi.so.1) by
 * tests/test_mpi_abi.py, then run unchanged under each implementation. Each rank prints one line:
 * the world, an exact allreduce, the ABI version, the library's own name and every libmpi_abi
 * file mapped into the process (from /proc/self/maps). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, size, len, one, sum, major = -1, minor = -1;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], line[4096], maps[4096] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Get_library_version(lib, &len);
    for (char *c = lib; *c; c++) if (*c == '\n') *c = ' ';
    MPI_Abi_get_version(&major, &minor);
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path || !strstr(path, "libmpi_abi")) continue;
        path[strcspn(path, "\n")] = '\0';
        if (!strstr(maps, path) && strlen(maps) + strlen(path) + 2 < sizeof maps) {
            strcat(maps, path);
            strcat(maps, ";");
        }
    }
    if (f) fclose(f);
    printf("ABI-RANK rank=%d size=%d sum=%d expect=%d abi=%d.%d maps=%s lib=%.100s\n", rank, size,
           sum, size * (size + 1) / 2, major, minor, maps, lib);
    MPI_Finalize();
    return sum == size * (size + 1) / 2 ? 0 : 1;
}
