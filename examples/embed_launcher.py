"""How a custom launcher embeds initorch: its own step, a profile, one call.

Copy this file.  It shows the whole embedding API:

* declare a step with ``@step`` (dependencies by name, ``wanted_by`` so that it
  is planned whenever the host pool is, the settings it reads, a teardown);
* register it next to the built-in steps and profiles;
* compose profiles, override settings, inspect the plan (order, waves, explain,
  fingerprint, graph export) before running anything;
* run exactly that plan with ``Run`` as a context manager (``initorch.start`` does
  load_plan and Run in one call), read step outputs, and let leaving the block
  tear everything down in reverse order.

Run it:  python examples/embed_launcher.py            (real start-up on CPU)
         python examples/embed_launcher.py --dry-run  (plan only; torch is not imported)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

from initorch import InitorchError, Registry, Run, StepFailedError, configure_logging, load_plan
from initorch.plugin import StepContext, setting, step
from initorch.renderers import graph_mermaid, plan_text

# A setting the step reads: profiles set it under config: (warmup: {fill_byte: 0}),
# --set warmup.fill_byte=7 overrides it, and a wrong value is refused at plan time.
FILL_BYTE = setting("warmup.fill_byte", int, default=0, minimum=0, maximum=255,
                    description="byte written into every page of the host pool at start-up")


@step(
    "warm_kv_cache",
    description="Touch every page of the registered host pool so first requests do not fault",
    requires=["register_mem_pool_host"],
    reads=["register_mem_pool_host"],
    after=["init_torch_distributed"],
    wanted_by=["register_mem_pool_host"],  # planned whenever the pool is registered
    settings=(FILL_BYTE,),
)
def warm_kv_cache(ctx: StepContext) -> int:
    registration = ctx.output("register_mem_pool_host")
    # writes every page: they are resident afterwards
    registration.pool.buffer.fill_(ctx.setting("warmup.fill_byte"))
    ctx.log.info("kv_cache_warmed", nbytes=registration.pool.nbytes)
    return int(registration.pool.nbytes)


@warm_kv_cache.teardown
def forget_kv_cache(ctx: StepContext, nbytes: int) -> None:
    ctx.log.info("kv_cache_released", nbytes=nbytes)


# A launcher's own profile: the built-in cpu profile with a smaller pool.  It need
# not list warm_kv_cache: its wanted_by pulls it in.
LAUNCHER_PROFILE = textwrap.dedent("""\
    description: example launcher - cpu with a small, warmed KV cache
    extends: cpu
    config:
      hicache:
        host_pool_mb: 16
      warmup:
        fill_byte: 0
    """)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()

    # initorch logs to the stdlib logger "initorch"; a server's own logging setup
    # captures it.  Here we use initorch's console renderer.
    configure_logging("console")
    registry = Registry.with_plugins()  # built-in steps, profiles, diagnoses
    registry.steps.add(warm_kv_cache)
    with tempfile.TemporaryDirectory() as folder:
        profile = Path(folder, "launcher.yaml")
        profile.write_text(LAUNCHER_PROFILE, encoding="utf-8")
        try:
            plan = load_plan([str(profile)], settings={"checks.verify_transfer": True},
                             registry=registry)
        except InitorchError as error:  # bad profile or settings: say what and where
            print(f"launcher: {error}", file=sys.stderr)
            return error.exit_code

    print(plan_text(plan))  # the dry run, as 'initorch plan' prints it
    print("\nwhy is the engine up before the pool is warmed?")
    for edge in plan.explain("init_shared_mooncake_transfer_engine", "warm_kv_cache"):
        print(f"  {edge.describe()}")
    print(f"\nwaves: {plan.waves}\nfingerprint: {plan.fingerprint}")
    print(f"\n{graph_mermaid(plan)}")
    if args.dry_run:
        return 0

    try:
        # Run the plan just inspected, exactly.  A launcher that does not inspect it
        # writes: with initorch.start(profile=..., registry=registry) as started: ...
        with Run(plan, diagnoses=registry.diagnoses) as run:
            engine = run.outputs["init_shared_mooncake_transfer_engine"]
            print(f"\nserving with Mooncake engine at {engine.session_id}; "
                  f"{run.outputs['warm_kv_cache']} bytes of KV cache warmed")
            # ... a real server would serve requests here ...
    except StepFailedError as failure:  # teardown already happened; __cause__ is the error
        print(f"launcher: {failure}", file=sys.stderr)
        return failure.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
