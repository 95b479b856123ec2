/* The example CGI programs, run as a server would run them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static int starts(const struct buf *b, const char *s)
{
    size_t n = strlen(s);
    return b->len >= n && memcmp(b->p, s, n) == 0;
}

static int ends(const struct buf *b, const char *s)
{
    size_t n = strlen(s);
    return b->len >= n && memcmp(b->p + b->len - n, s, n) == 0;
}

static int contains(const struct buf *b, const char *s)
{
    return b->len && memmem(b->p, b->len, s, strlen(s)) != NULL;
}

static size_t occurrences(const struct buf *b, const char *s)
{
    size_t n = 0, k = strlen(s);
    for (const char *p = b->p, *end = b->p + b->len;
         (p = memmem(p, (size_t)(end - p), s, k)); p += k)
        n++;
    return n;
}

static int run_ok(const char *cgi, const char *const env[], struct buf *out)
{
    int st = run_cgi(cgi, env, out);
    if (!CHECK(st == 0, "%s exited %d", cgi, st))
        t_dump_stderr();
    return st == 0;
}

static void test_board_cgi(void)
{
    char data[4200];
    snprintf(data, sizeof data, "TGW_BOARD_DATA=%s", t_board_data);
    struct buf pages[6] = {{0}};
    for (int p = 1; p <= 5; p++) {
        char qs[32], title[64];
        snprintf(qs, sizeof qs, "QUERY_STRING=page=%d", p);
        snprintf(title, sizeof title, "page %d of 5", p);
        const char *env[] = {data, qs, NULL};
        if (!run_ok("board.cgi", env, &pages[p]))
            continue;
        CHECK(starts(&pages[p], "Content-Type: text/html; charset=utf-8\n\n"
                                "<!DOCTYPE html>\n"),
              "board page %d: header", p);
        CHECK(ends(&pages[p], "</body>\n</html>\n"), "board page %d: ending", p);
        CHECK(contains(&pages[p], title), "board page %d: title", p);
        CHECK(occurrences(&pages[p], "<div class=\"post\"") == 60,
              "board page %d: %zu posts, want 60", p,
              occurrences(&pages[p], "<div class=\"post\""));
        CHECK(p == 1 || !buf_eq(&pages[p], &pages[p - 1]), "page %d = page %d", p,
              p - 1);
    }

    /* The same bytes whatever the discipline and buffer size. */
    static const char *const bufs[] = {"1", "7", "1024", "16K", "65536"};
    for (int d = 1; d <= 6; d++)
        for (size_t bi = 0; bi < 5; bi++)
            for (int p = 1; p <= 5; p += 2) {
                char de[32], be[32], qs[32];
                snprintf(de, sizeof de, "TGW_DISCIPLINE=%d", d);
                snprintf(be, sizeof be, "TGW_BUFSIZE=%s", bufs[bi]);
                snprintf(qs, sizeof qs, "QUERY_STRING=page=%d", p);
                const char *env[] = {data, de, be, qs, NULL};
                struct buf out = {0};
                if (run_ok("board.cgi", env, &out))
                    CHECK(buf_eq(&out, &pages[p]),
                          "board page %d, discipline %d, bufsize %s: differs at %zu",
                          p, d, bufs[bi], buf_diff_at(&out, &pages[p]));
                buf_free(&out);
            }

    /* Default page, parameters around it, bad pages. */
    static const char *const same_as_1[] = {NULL, "QUERY_STRING=",
                                            "QUERY_STRING=sort=new"};
    for (size_t i = 0; i < 3; i++) {
        const char *env[] = {data, same_as_1[i], NULL};
        struct buf out = {0};
        if (run_ok("board.cgi", env, &out))
            CHECK(buf_eq(&out, &pages[1]), "%s: not page 1",
                  same_as_1[i] ? same_as_1[i] : "no QUERY_STRING");
        buf_free(&out);
    }
    {
        const char *env[] = {data, "QUERY_STRING=sort=new&page=3", NULL};
        struct buf out = {0};
        if (run_ok("board.cgi", env, &out))
            CHECK(buf_eq(&out, &pages[3]), "page=3 after another parameter");
        buf_free(&out);
    }
    static const char *const bad[] = {"QUERY_STRING=page=0", "QUERY_STRING=page=6",
                                      "QUERY_STRING=page=abc", "QUERY_STRING=page=12",
                                      "QUERY_STRING=page=%zz"};
    for (size_t i = 0; i < 5; i++) {
        const char *env[] = {data, bad[i], NULL};
        struct buf out = {0};
        if (run_ok("board.cgi", env, &out))
            CHECK(starts(&out, "Status: 404 Not Found\n"), "%s: not 404", bad[i]);
        buf_free(&out);
    }

    /* Escaping of post fields. */
    static const char evil[] = "<script>alert(\"x\")</script>\t2024-01-01 00:00\t"
                               "Tom & Jerry's\t1 < 2 > 0\n";
    char *path = t_write_file("evil.txt", evil, sizeof evil - 1);
    char evil_env[4200];
    snprintf(evil_env, sizeof evil_env, "TGW_BOARD_DATA=%s", path);
    const char *env[] = {evil_env, NULL};
    struct buf out = {0};
    if (run_ok("board.cgi", env, &out)) {
        CHECK(contains(&out, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") &&
                  contains(&out, "Tom &amp; Jerry&#39;s") &&
                  contains(&out, "1 &lt; 2 &gt; 0") && !contains(&out, "<script>"),
              "fields not escaped");
    }
    buf_free(&out);
    free(path);

    /* Misconfiguration is a 500 and a failed exit, never a guess. */
    const char *bad_d[] = {data, "TGW_DISCIPLINE=9", NULL};
    int st = run_cgi("board.cgi", bad_d, &out);
    CHECK(st != 0 && starts(&out, "Status: 500"), "TGW_DISCIPLINE=9: exit %d", st);
    buf_free(&out);
    const char *no_data[] = {"TGW_BOARD_DATA=/nonexistent/posts", NULL};
    run_cgi("board.cgi", no_data, &out);
    CHECK(starts(&out, "Status: 500"), "missing data file: not 500");
    buf_free(&out);

    /* No TGW_BOARD_DATA: the posts beside the program as the server names
     * it (SCRIPT_FILENAME), so a copied site finds its own. */
    struct buf posts = {0};
    t_read_file(t_board_data, &posts);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/site", t_tmp);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/site/cgi-bin", t_tmp);
    mkdir(dir, 0755);
    free(t_write_file("site/cgi-bin/board-data.txt", posts.p, posts.len));
    buf_free(&posts);
    char script[4200];
    snprintf(script, sizeof script, "SCRIPT_FILENAME=%s/site/cgi-bin/board.cgi", t_tmp);
    const char *beside[] = {script, "QUERY_STRING=page=2", NULL};
    if (run_ok("board.cgi", beside, &out))
        CHECK(buf_eq(&out, &pages[2]), "board data beside SCRIPT_FILENAME: differs at %zu",
              buf_diff_at(&out, &pages[2]));
    buf_free(&out);
    /* The demo page: the site's stylesheet and a way back. */
    CHECK(contains(&pages[1], "<link rel=\"stylesheet\" href=\"/css/style.css\">") &&
              contains(&pages[1], "<a href=\"/\">"),
          "board page: no stylesheet or no way back");

    for (int p = 0; p <= 5; p++)
        buf_free(&pages[p]);
}

static void test_hello(void)
{
    struct buf first = {0};
    const char *env0[] = {NULL};
    if (!run_ok("hello.cgi", env0, &first))
        return;
    CHECK(starts(&first, "Content-Type: text/html; charset=utf-8\n\n<!DOCTYPE html>") &&
              ends(&first, "</html>\n") && first.len > 4500 && first.len < 6000,
          "hello.cgi: %zu bytes", first.len);
    for (int d = 1; d <= 6; d++) {
        char de[32];
        snprintf(de, sizeof de, "TGW_DISCIPLINE=%d", d);
        const char *env[] = {de, "TGW_BUFSIZE=1K", NULL};
        struct buf out = {0};
        if (run_ok("hello.cgi", env, &out))
            CHECK(buf_eq(&out, &first), "hello.cgi discipline %d differs", d);
        buf_free(&out);
    }
    buf_free(&first);
}

/* Names inside and outside the root, with the status each must get. */
static void check_names(const char *root_env, const char *secret)
{
    static const struct {
        const char *name;
        const char *status; /* NULL: 200 with sub/b.txt; "walk": see below */
    } cases[] = {
        {"QUERY_STRING=file=sub%2Fb.txt", NULL},
        {"PATH_INFO=/sub/b.txt", NULL},
        {"PATH_INFO=/../secret", "403"},
        {"PATH_INFO=/sub/../a.bin", "403"},
        {"PATH_INFO=/sub/..", "403"},
        {"PATH_INFO=//etc/passwd", "403"},
        {"QUERY_STRING=file=..%2Fsecret", "403"},
        {"QUERY_STRING=file=../secret", "403"},
        {"QUERY_STRING=file=%2Fetc%2Fpasswd", "403"},
        {"QUERY_STRING=file=/etc/passwd", "403"},
        {"QUERY_STRING=file=out/secret", "403"},
        {"PATH_INFO=/up", "403"},
        {"PATH_INFO=/in", "walk"}, /* inside the root: 200, but 403 for the walk */
        {"PATH_INFO=/sub", "403"},
        {"PATH_INFO=/fifo", "403"},
        {"QUERY_STRING=file=a.bin%00.txt", "400"},
        {"PATH_INFO=/nope", "404"},
        {"PATH_INFO=/sub/nope/x", "404"},
        {"QUERY_STRING=other=1", "400"},
        {"PATH_INFO=/", "400"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *env[] = {root_env, cases[i].name, NULL};
        struct buf out = {0};
        const char *status = cases[i].status;
        if (status && strcmp(status, "walk") == 0)
            status = t_no_openat2 ? "403" : "200";
        if (run_ok("download.cgi", env, &out)) {
            char want_status[64];
            snprintf(want_status, sizeof want_status, "Status: %s ", status ? status : "");
            CHECK(status && strcmp(status, "200") == 0
                      ? starts(&out, "Content-Type: application/octet-stream\n"
                                     "Content-Length: 100000\n\n")
                  : status ? starts(&out, want_status)
                           : starts(&out, "Content-Type: application/octet-stream\n"
                                          "Content-Length: 4\n\nbee\n"),
                  "download %s%s: got '%.40s', want %s", cases[i].name,
                  t_no_openat2 ? " (no openat2)" : "", out.p ? out.p : "",
                  status ? status : "200");
            CHECK(!contains(&out, secret), "download %s leaked the secret",
                  cases[i].name);
        }
        buf_free(&out);
    }

}

static void test_download(void)
{
    /* t_tmp/root holds the servable files; t_tmp/secret is outside it. */
    char root[4200], p[4400];
    snprintf(root, sizeof root, "%s/root", t_tmp);
    mkdir(root, 0700);
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0700);
    const char *secret = "TOP-SECRET-CONTENT";
    free(t_write_file("secret", secret, strlen(secret)));
    size_t n = 100000;
    char *data = malloc(n);
    t_pattern(data, n, 9);
    free(t_write_file("root/a.bin", data, n));
    free(t_write_file("root/sub/b.txt", "bee\n", 4));
    snprintf(p, sizeof p, "%s/out", root);
    symlink(t_tmp, p); /* a symlink leading out of the root */
    snprintf(p, sizeof p, "%s/up", root);
    symlink("../secret", p);
    snprintf(p, sizeof p, "%s/in", root);
    symlink("a.bin", p); /* inside: allowed by openat2 */
    snprintf(p, sizeof p, "%s/fifo", root);
    mkfifo(p, 0600);

    char root_env[4300];
    snprintf(root_env, sizeof root_env, "TGW_DOWNLOAD_ROOT=%s", root);

    struct buf want = {0};
    static const char hdr[] =
        "Content-Type: application/octet-stream\nContent-Length: 100000\n\n";
    buf_add(&want, hdr, strlen(hdr));
    buf_add(&want, data, n);
    static const char *const methods[] = {NULL, "TGW_FILE_METHOD=read",
                                          "TGW_FILE_METHOD=mmap",
                                          "TGW_FILE_METHOD=sendfile",
                                          "TGW_FILE_METHOD=splice"};
    static const char *const names[] = {"PATH_INFO=/a.bin", "QUERY_STRING=file=a.bin",
                                        "QUERY_STRING=x=1&file=%61.bin",
                                        "PATH_INFO=/in"};
    for (size_t mi = 0; mi < 5; mi++)
        for (size_t ni = 0; ni < 4; ni++) {
            const char *env[] = {root_env, names[ni], "TGW_DISCIPLINE=4",
                                 methods[mi], NULL};
            struct buf out = {0};
            if (run_ok("download.cgi", env, &out))
                CHECK(buf_eq(&out, &want), "download %s %s: %zu bytes, differs at %zu",
                      names[ni], methods[mi] ? methods[mi] : "(default)", out.len,
                      buf_diff_at(&out, &want));
            buf_free(&out);
        }
    buf_free(&want);

    /* Both ways of confining the open: openat2(RESOLVE_BENEATH), then the
     * O_NOFOLLOW walk used where openat2 is missing. */
    for (t_no_openat2 = 0; t_no_openat2 <= 1; t_no_openat2++)
        check_names(root_env, secret);
    t_no_openat2 = 0;

    const char *head[] = {root_env, "PATH_INFO=/a.bin", "REQUEST_METHOD=HEAD", NULL};
    struct buf out = {0};
    if (run_ok("download.cgi", head, &out))
        CHECK(out.len == 63 && ends(&out, "Content-Length: 100000\n\n"),
              "HEAD: %zu bytes", out.len);
    buf_free(&out);

    /* No TGW_DOWNLOAD_ROOT: files/ beside the program's directory (the
     * demo site's layout), found from SCRIPT_FILENAME; with neither that
     * nor a files/ beside the built program, a 500. */
    char files[4200];
    snprintf(files, sizeof files, "%s/site/files", t_tmp);
    mkdir(files, 0755);
    free(t_write_file("site/files/c.txt", "sea\n", 4));
    char script[4200];
    snprintf(script, sizeof script, "SCRIPT_FILENAME=%s/site/cgi-bin/download.cgi", t_tmp);
    const char *beside[] = {script, "PATH_INFO=/c.txt", NULL};
    if (run_ok("download.cgi", beside, &out))
        CHECK(ends(&out, "Content-Length: 4\n\nsea\n"), "files/ beside SCRIPT_FILENAME: %.*s",
              (int)out.len, out.p);
    buf_free(&out);
    const char *no_root[] = {"PATH_INFO=/a.bin", NULL};
    run_cgi("download.cgi", no_root, &out);
    CHECK(starts(&out, "Status: 500 "), "no root: not 500");
    buf_free(&out);
    const char *bad_method[] = {root_env, "PATH_INFO=/a.bin", "TGW_FILE_METHOD=fast",
                                NULL};
    run_cgi("download.cgi", bad_method, &out);
    CHECK(starts(&out, "Status: 500 "), "bad TGW_FILE_METHOD: not 500");
    buf_free(&out);
    free(data);
}

void test_cgi(void)
{
    test_board_cgi();
    test_hello();
    test_download();
}
