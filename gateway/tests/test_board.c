/* The query interface and the data generator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tern_gw.h"

static int str_is(struct tgw_str s, const char *want)
{
    return s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

static void check_post(const tgw_board *b, size_t n, const char *author,
                       const char *date, const char *subject, const char *body)
{
    struct tgw_post p;
    int r = tgw_board_get(b, n, &p);
    CHECK(r == 0 && str_is(p.author, author) && str_is(p.date, date) &&
              str_is(p.subject, subject) && str_is(p.body, body),
          "post %zu: r=%d author '%.*s' date '%.*s' subject '%.*s' body '%.*s'",
          n, r, (int)p.author.n, p.author.p, (int)p.date.n, p.date.p,
          (int)p.subject.n, p.subject.p, (int)p.body.n, p.body.p);
}

void test_board(void)
{
    static const char data[] = "ann\t2024-01-01\thello\tfirst body\n"
                               "bob\t2024-01-02\n"
                               "cy\td\ts\tbody\twith a tab\r\n"
                               "\n"
                               "last\t2024-02-02\tno newline\tat the end";
    char *path = t_write_file("posts.txt", data, sizeof data - 1);
    tgw_board *b = tgw_board_connect(path);
    if (CHECK(b, "connect %s: %s", path, strerror(errno))) {
        CHECK(tgw_board_count(b) == 5, "count %zu, want 5", tgw_board_count(b));
        check_post(b, 1, "ann", "2024-01-01", "hello", "first body");
        check_post(b, 2, "bob", "2024-01-02", "", "");
        check_post(b, 3, "cy", "d", "s", "body\twith a tab");
        check_post(b, 4, "", "", "", "");
        check_post(b, 5, "last", "2024-02-02", "no newline", "at the end");
        struct tgw_post p;
        tgw_board_get(b, 1, &p);
        CHECK(str_is(p.line, "ann\t2024-01-01\thello\tfirst body"), "raw line");
        errno = 0;
        CHECK(tgw_board_get(b, 0, &p) == -1 && errno == ERANGE, "line 0 accepted");
        errno = 0;
        CHECK(tgw_board_get(b, 6, &p) == -1 && errno == ERANGE, "line 6 accepted");
        tgw_board_release(b);
    }
    free(path);

    path = t_write_file("empty.txt", "", 0);
    b = tgw_board_connect(path);
    CHECK(b && tgw_board_count(b) == 0, "empty file: count not 0");
    tgw_board_release(b);
    free(path);

    errno = 0;
    CHECK(!tgw_board_connect("/nonexistent/posts") && errno == ENOENT,
          "missing data file not reported");

    /* The committed data file is exactly what the generator makes. */
    char gen[4200];
    snprintf(gen, sizeof gen, "%s/board-gen", t_build);
    char *argv[] = {gen, "300", NULL};
    const char *env[] = {NULL};
    struct buf out = {0}, committed = {0};
    int st = run_prog(gen, argv, env, &out);
    t_read_file(t_board_data, &committed);
    CHECK(st == 0 && buf_eq(&out, &committed),
          "board-gen 300 differs from %s (%zu vs %zu bytes, at %zu)",
          t_board_data, out.len, committed.len, buf_diff_at(&out, &committed));
    buf_free(&out);
    buf_free(&committed);

    b = tgw_board_connect(t_board_data);
    if (CHECK(b, "connect %s", t_board_data)) {
        size_t n = tgw_board_count(b), complete = 0;
        for (size_t i = 1; i <= n; i++) {
            struct tgw_post p;
            complete += tgw_board_get(b, i, &p) == 0 && p.author.n && p.date.n == 16 &&
                        p.subject.n && p.body.n > 20;
        }
        CHECK(n == 300 && complete == n, "board data: %zu posts, %zu complete", n,
              complete);
        tgw_board_release(b);
    }
}
