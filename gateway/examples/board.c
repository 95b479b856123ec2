/*
 * board.cgi — bulletin-board page generator.
 *   QUERY_STRING   page=1..5 (default 1; anything else is 404)
 *   TGW_BOARD_DATA the posts file (default: board-data.txt beside the
 *                  program, so a copied site finds its own; `make demo`
 *                  installs it there)
 *   TGW_DISCIPLINE, TGW_BUFSIZE   output discipline 1-6 and buffer size
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "board_render.h"
#include "cgi_util.h"

int main(void)
{
    tgw_out *out = cgi_open_stdout("board.cgi");
    if (!out)
        return 1;
    char val[16];
    int n = cgi_query_param(getenv("QUERY_STRING"), "page", val, sizeof val);
    int page = n == -1 ? 1 /* absent */
               : n == 1 && val[0] >= '1' && val[0] <= '0' + BOARD_PAGES
                   ? val[0] - '0'
                   : 0;
    char beside[4096];
    const char *path = getenv("TGW_BOARD_DATA");
    if (!path || !*path)
        path = cgi_beside_self("board-data.txt", beside, sizeof beside) ? "board-data.txt" : beside;

    int r;
    tgw_board *b = page ? tgw_board_connect(path) : NULL;
    if (!page) {
        r = cgi_error(out, 404, "no such page");
    } else if (!b) {
        perror(path);
        r = cgi_error(out, 500, "board data unavailable");
    } else {
        r = tgw_puts(out, "Content-Type: text/html; charset=utf-8\n\n");
        r = r ? r : board_render_page(out, b, page, BOARD_SITE);
    }
    tgw_board_release(b);
    if (tgw_close(out) || r) {
        perror("board.cgi: write");
        return 1;
    }
    return 0;
}
