/* The layers of core/ (ARCHITECTURE.md): every #include of a qlab header names its
 * layer ("model/forward.h"), a file includes headers of its own layer or lower ones
 * only, and no module reaches itself through its includes. Within a layer, a module
 * split into a driver and its leaves (the `families` table) keeps its calls one way:
 * a leaf includes neither its driver's header nor another leaf's, so it can only call
 * down (into the family's common module), never back into the driver.
 *
 * The layers come as arguments, lowest first, from core/meson.build's list, so the
 * order is declared once. The checker also runs on small trees written here with a
 * layer violation, an include cycle, an unqualified include, a leaf including its
 * driver and a leaf including another leaf, which it must find. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/data.h"
#include "base/util.h"
#include "qltest.h"

#define MAX_LAYERS  16
#define MAX_MODULES 512
#define MAX_EDGES   64

typedef struct {
    char name[160]; /* "model/forward": layer folder and module */
    int layer;      /* index into the layer list */
    int edges[MAX_EDGES];
    int n_edges;
    int mark; /* DFS: 0 new, 1 on the stack, 2 done */
} module;

/* A driver and the leaves it calls, in one layer folder: module names without the
 * extension ("report" for report.c and report.h). The leaves' common module needs no
 * entry: anyone may include it. */
#define MAX_LEAVES 8
typedef struct {
    const char *layer;
    const char *driver;
    const char *leaves[MAX_LEAVES]; /* NULL-terminated */
} family;

/* core/'s drivers and leaves. */
static const family core_families[] = {
    {"results",
     "report",
     {"report_plot", "report_pairs", "report_texts", "report_html", "report_csv", NULL}},
};

typedef struct {
    const char *root; /* the folder holding the layer folders (core/) */
    const family *families;
    size_t n_families;
    const char *const *layers;
    int n_layers;
    module mods[MAX_MODULES];
    int n_mods;
    bool quiet;      /* the self-tests: no messages */
    int problems;    /* violations found */
    char first[512]; /* the first one, for the negative tests */
} checker;

static void problem(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(checker *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->problems++ == 0)
        ql_strlcpy(c->first, msg, sizeof c->first);
    if (!c->quiet)
        fprintf(stderr, "layers: %s\n", msg);
}

static int layer_index(const checker *c, const char *name, size_t len)
{
    for (int i = 0; i < c->n_layers; i++)
        if (strlen(c->layers[i]) == len && strncmp(c->layers[i], name, len) == 0)
            return i;
    return -1;
}

/* The module a header or source file belongs to: its name without the extension and
 * without an "_impl" suffix (a module's private header). */
static void module_name(const char *layer, const char *file, char *out, size_t size)
{
    char base[128];
    ql_strlcpy(base, file, sizeof base);
    char *dot = strrchr(base, '.');
    if (dot)
        *dot = '\0';
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, "_impl") == 0)
        base[n - 5] = '\0';
    snprintf(out, size, "%s/%s", layer, base);
}

static int module_id(checker *c, const char *name, int layer)
{
    for (int i = 0; i < c->n_mods; i++)
        if (strcmp(c->mods[i].name, name) == 0)
            return i;
    QL_ASSERT(c->n_mods < MAX_MODULES);
    module *m = &c->mods[c->n_mods];
    memset(m, 0, sizeof *m);
    ql_strlcpy(m->name, name, sizeof m->name);
    m->layer = layer;
    return c->n_mods++;
}

static void add_edge(checker *c, int from, int to)
{
    module *m = &c->mods[from];
    if (from == to)
        return;
    for (int i = 0; i < m->n_edges; i++)
        if (m->edges[i] == to)
            return;
    QL_ASSERT(m->n_edges < MAX_EDGES);
    m->edges[m->n_edges++] = to;
}

/* Whether module `name` ("report_plot") of layer folder dir is a leaf of family f. */
static bool is_leaf(const family *f, const char *dir, const char *name)
{
    if (strcmp(f->layer, dir) != 0)
        return false;
    for (size_t i = 0; i < MAX_LEAVES && f->leaves[i]; i++)
        if (strcmp(f->leaves[i], name) == 0)
            return true;
    return false;
}

/* The family rule for an include of module `to` (of layer folder to_dir) by a file of
 * module `from` in folder dir (module names without the folder). */
static void check_family(checker *c, const char *where, const char *dir, const char *from,
                         const char *to_dir, const char *to)
{
    for (size_t k = 0; k < c->n_families; k++) {
        const family *f = &c->families[k];
        if (!is_leaf(f, dir, from) || strcmp(to, from) == 0 || strcmp(to_dir, f->layer) != 0)
            continue;
        if (strcmp(to, f->driver) == 0)
            problem(c,
                    "%s: %s, a leaf of %s/%s, includes its driver's header (a leaf calls "
                    "only down, into the common module)",
                    where, from, f->layer, f->driver);
        else if (is_leaf(f, to_dir, to))
            problem(c,
                    "%s: %s, a leaf of %s/%s, includes another leaf's header (%s): what "
                    "two leaves share goes into the common module",
                    where, from, f->layer, f->driver, to);
    }
}

/* Every driver and leaf of the table exists (a renamed file cannot leave its rule
 * behind): its .c file is in the tree. */
static void check_families_exist(checker *c)
{
    for (size_t k = 0; k < c->n_families; k++) {
        const family *f = &c->families[k];
        for (size_t i = 0; i <= MAX_LEAVES; i++) {
            const char *m = i == 0 ? f->driver : f->leaves[i - 1];
            if (!m)
                break;
            char path[QL_PATH_MAX];
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s/%s.c", c->root, f->layer, m);
            if (stat(path, &sb) != 0)
                problem(c, "families: %s/%s.c is in the table but not in the tree", f->layer, m);
        }
    }
}

static void check_file(checker *c, int layer, const char *dir, const char *file)
{
    char path[QL_PATH_MAX], self[160];
    snprintf(path, sizeof path, "%s/%s/%s", c->root, dir, file);
    module_name(dir, file, self, sizeof self);
    int from = module_id(c, self, layer);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    if (!f)
        return;
    char line[1024], where[QL_PATH_MAX + 16];
    for (int ln = 1; fgets(line, sizeof line, f); ln++) {
        if (strncmp(line, "#include \"", 10) != 0)
            continue;
        char *inc = line + 10, *end = strchr(inc, '"');
        if (!end)
            continue;
        *end = '\0';
        snprintf(where, sizeof where, "%s/%s:%d", dir, file, ln);
        const char *slash = strchr(inc, '/');
        if (!slash) {
            /* A header of the same folder (cli's own) or the build's configuration. */
            char local[QL_PATH_MAX];
            struct stat sb;
            snprintf(local, sizeof local, "%s/%s/%s", c->root, dir, inc);
            if (strcmp(inc, "ql_config.h") != 0 && stat(local, &sb) != 0)
                problem(c, "%s: include \"%s\" names no layer (write \"layer/%s\")", where, inc,
                        inc);
            if (strcmp(inc, "ql_config.h") != 0) {
                char to[160];
                module_name(dir, inc, to, sizeof to);
                check_family(c, where, dir, self + strlen(dir) + 1, dir, to + strlen(dir) + 1);
                add_edge(c, from, module_id(c, to, layer));
            }
            continue;
        }
        int to_layer = layer_index(c, inc, (size_t)(slash - inc));
        if (to_layer < 0) {
            problem(c, "%s: include \"%s\": its folder is not a layer", where, inc);
            continue;
        }
        if (to_layer > layer) {
            char allowed[256] = "";
            for (int i = 0; i <= layer; i++) {
                strncat(allowed, i ? ", " : "", sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, c->layers[i], sizeof allowed - strlen(allowed) - 1);
            }
            problem(c, "%s: includes \"%s\", a higher layer (it may include %s)", where, inc,
                    allowed);
        }
        char to[160];
        module_name(c->layers[to_layer], slash + 1, to, sizeof to);
        check_family(c, where, dir, self + strlen(dir) + 1, c->layers[to_layer],
                     to + strlen(c->layers[to_layer]) + 1);
        add_edge(c, from, module_id(c, to, to_layer));
    }
    fclose(f);
}

/* Depth-first search for a cycle; prints the modules on it. */
static bool find_cycle(checker *c, int v, int *stack, int depth)
{
    module *m = &c->mods[v];
    m->mark = 1;
    stack[depth] = v;
    for (int i = 0; i < m->n_edges; i++) {
        int w = m->edges[i];
        if (c->mods[w].mark == 1) {
            char path[1024] = "";
            int k = depth;
            while (k > 0 && stack[k] != w)
                k--;
            for (; k <= depth; k++) {
                strncat(path, c->mods[stack[k]].name, sizeof path - strlen(path) - 1);
                strncat(path, " -> ", sizeof path - strlen(path) - 1);
            }
            problem(c, "include cycle: %s%s", path, c->mods[w].name);
            return true;
        }
        if (c->mods[w].mark == 0 && find_cycle(c, w, stack, depth + 1))
            return true;
    }
    m->mark = 2;
    return false;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks every .c and .h file under root/<layer>/; returns the number of problems. */
static int check_tree(checker *c, const char *root, const char *const *layers, int n_layers,
                      const family *families, size_t n_families, bool quiet)
{
    memset(c, 0, sizeof *c);
    c->quiet = quiet;
    c->root = root;
    c->families = families;
    c->n_families = n_families;
    check_families_exist(c);
    c->layers = layers;
    c->n_layers = n_layers;
    for (int l = 0; l < n_layers; l++) {
        char dir[QL_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", root, layers[l]);
        DIR *d = opendir(dir);
        CHECK_MSG(d != NULL, "layer folder %s is missing", dir);
        if (!d)
            continue;
        char *names[256];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < 256) {
            size_t len = strlen(e->d_name);
            if (len > 2 && e->d_name[len - 2] == '.' &&
                (e->d_name[len - 1] == 'c' || e->d_name[len - 1] == 'h'))
                names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], cmp_str);
        for (int i = 0; i < n; i++) {
            check_file(c, l, layers[l], names[i]);
            free(names[i]);
        }
    }
    int stack[MAX_MODULES];
    for (int v = 0; v < c->n_mods; v++)
        if (c->mods[v].mark == 0 && find_cycle(c, v, stack, 0))
            break;
    return c->problems;
}

/* ------------------------------------------------------------------------- */
/* The checker finds what it must                                             */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The layers of the small trees, lowest first. */
static const char *const small_layers[] = {"lo", "hi"};

/* A small tree's folders: root (a temporary folder called name) and its layer folders. */
static const char *small_tree_dirs(const char *name)
{
    const char *root = qlt_tmp(name);
    char p[QL_PATH_MAX];
    mkdir(root, 0755);
    for (size_t i = 0; i < sizeof small_layers / sizeof small_layers[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", root, small_layers[i]);
        mkdir(p, 0755);
    }
    return root;
}

/* A two-layer tree (lo, hi) with one file per layer: lo/a.h includes text_a. */
static int check_small_tree(checker *c, const char *name, const char *text_a, const char *text_b)
{
    const char *root = small_tree_dirs(name);
    char p[QL_PATH_MAX];
    snprintf(p, sizeof p, "%s/lo/a.h", root);
    write_file(p, text_a);
    snprintf(p, sizeof p, "%s/lo/b.h", root);
    write_file(p, text_b);
    snprintf(p, sizeof p, "%s/hi/c.h", root);
    write_file(p, "#include \"lo/a.h\"\n");
    return check_tree(c, root, small_layers, 2, NULL, 0, true);
}

/* A family in layer lo: driver d (d.c, d.h), leaves l1 and l2, common module m. The
 * driver includes both leaves' headers; leaf l1.c holds text_l1 (NULL: no l1.c). */
static int check_family_tree(checker *c, const char *name, const char *text_l1)
{
    static const family fams[] = {{"lo", "d", {"l1", "l2", NULL}}};
    const char *root = small_tree_dirs(name);
    char p[QL_PATH_MAX];
    static const char *const files[][2] = {
        {"d.h", "#include <stdio.h>\n"},
        {"d.c", "#include \"lo/d.h\"\n#include \"lo/l1.h\"\n#include \"lo/l2.h\"\n"},
        {"l1.h", "#include \"lo/m.h\"\n"},
        {"l2.h", "#include \"lo/m.h\"\n"},
        {"l2.c", "#include \"lo/l2.h\"\n"},
        {"m.h", "#include <stdio.h>\n"},
        {"m.c", "#include \"lo/m.h\"\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/lo/%s", root, files[i][0]);
        write_file(p, files[i][1]);
    }
    snprintf(p, sizeof p, "%s/lo/l1.c", root);
    if (text_l1)
        write_file(p, text_l1);
    else
        remove(p);
    return check_tree(c, root, small_layers, 2, fams, 1, true);
}

static void checker_finds_problems(void)
{
    static checker c;
    CHECK_EQ_INT(check_small_tree(&c, "clean", "#include \"lo/b.h\"\n", "#include <stdio.h>\n"), 0);
    CHECK(check_small_tree(&c, "upward", "#include \"hi/c.h\"\n", "") > 0);
    CHECK_MSG(strstr(c.first, "higher layer") != NULL, "%s", c.first);
    CHECK(check_small_tree(&c, "cycle", "#include \"lo/b.h\"\n", "#include \"lo/a.h\"\n") > 0);
    CHECK_MSG(strstr(c.first, "include cycle") != NULL, "%s", c.first);
    CHECK(check_small_tree(&c, "bare", "#include \"elsewhere.h\"\n", "") > 0);
    CHECK_MSG(strstr(c.first, "names no layer") != NULL, "%s", c.first);

    CHECK_EQ_INT(check_family_tree(&c, "family-clean", "#include \"lo/l1.h\"\n"), 0);
    /* A leaf including its driver: the driver-leaf rule names it (the include cycle
     * d -> l1 -> d is found too). */
    CHECK(check_family_tree(&c, "family-driver", "#include \"lo/l1.h\"\n#include \"lo/d.h\"\n") >
          0);
    CHECK_MSG(strstr(c.first, "includes its driver's header") != NULL, "%s", c.first);
    /* A leaf including another leaf: no cycle, but the rule refuses it. */
    CHECK_EQ_INT(check_family_tree(&c, "family-leaf", "#include \"lo/l2.h\"\n"), 1);
    CHECK_MSG(strstr(c.first, "includes another leaf's header") != NULL, "%s", c.first);
    /* A family whose leaf is gone from the tree. */
    CHECK_EQ_INT(check_family_tree(&c, "family-gone", NULL), 1);
    CHECK_MSG(strstr(c.first, "in the table but not in the tree") != NULL, "%s", c.first);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc - 1 > MAX_LAYERS) {
        fprintf(stderr, "usage: test_layers LAYER... (lowest first)\n");
        return 2;
    }
    checker_finds_problems();
    static checker c;
    int n = check_tree(&c, qlt_source("core"), (const char *const *)(argv + 1), argc - 1,
                       core_families, sizeof core_families / sizeof core_families[0], false);
    CHECK_MSG(n == 0, "%d layering problems in core/ (listed above)", n);
    printf("%d modules in %d layers checked\n", c.n_mods, argc - 1);
    return qlt_done();
}
