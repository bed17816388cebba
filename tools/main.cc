// The chorus command line: dispatches to subcommands; every error is one line and a non-zero exit.
#include <exception>

#include "tools/common.h"

int main(int argc, char** argv) {
  CLI::App app{"chorus — a multi-agent LLM inference engine with a shared, compressed KV cache.\n"
               "Run `chorus COMMAND --help` for the options of each command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "chorus 0.1");
  using namespace chorus::cli;
  RunFn gen = AddGenerate(app), ins = AddInspect(app), ev = AddEval(app), be = AddBench(app), ag = AddAgents(app),
        em = AddEmbed(app), sv = AddServe(app), ca = AddCalibrate(app);
  std::string cpu_target;
  AddCpuTargetFlag(app, &cpu_target);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s (see `chorus --help`)\n", e.what());
    return 2;
  }
  if (chorus::Status st = ApplyCpuTargetFlag(cpu_target); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  try {
    if (app.got_subcommand("generate")) return gen();
    if (app.got_subcommand("inspect")) return ins();
    if (app.got_subcommand("eval")) return ev();
    if (app.got_subcommand("bench")) return be();
    if (app.got_subcommand("agents")) return ag();
    if (app.got_subcommand("embed")) return em();
    if (app.got_subcommand("serve")) return sv();
    if (app.got_subcommand("calibrate")) return ca();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
