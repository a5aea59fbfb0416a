#include "app/cli.h"

int main(int argc, char** argv) { return gdw::cli_main(argc, argv); }
