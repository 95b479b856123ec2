/* test_gw BUILD_DIR BOARD_DATA — the gateway's correctness tests. */
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int rm_one(const char *path, const struct stat *st, int type,
                  struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_gw BUILD_DIR BOARD_DATA\n");
        return 2;
    }
    t_build = argv[1];
    t_board_data = argv[2];
    const char *tmpdir = getenv("TMPDIR");
    snprintf(t_tmp, 4096, "%s/tgw-test-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(t_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    /* A closed reader must show up as EPIPE from write, not kill us. */
    signal(SIGPIPE, SIG_IGN);

    test_output();
    test_file();
    test_board();
    test_cgi();

    nftw(t_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    printf("gateway: %d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}
