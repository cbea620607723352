/* tests/helpers/check/recipe_refused.h — a recipe YAML file refused with exactly one message (the recipe tests). */
#ifndef LWQT_RECIPE_REFUSED_H
#define LWQT_RECIPE_REFUSED_H

#include <criterion/criterion.h>

#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"
#include "tests/helpers/craft.h"

/* `text` written as r.yaml in the current directory is refused with exactly `msg` */
static inline void lwqt_recipe_refused(const char *text, const char *msg)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    lwqt_write_str("r.yaml", text);
    cr_assert_neq(lwq_recipe_yaml_load("r.yaml", NULL, &r, &run, &e), 0);
    cr_assert_str_eq(e.msg, msg);
}

#endif
