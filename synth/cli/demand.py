"""``synth demand``: write alltoallv demand files (``synth.demand/1``), such as a mixture-of-experts dispatch."""

from __future__ import annotations

from typing import Annotated

import typer

from synth.cli.common import console, output_file, shown

demand_app = typer.Typer(help="Write alltoallv demand files (synth.demand/1) for `-c alltoallv --demand FILE`.",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add ``demand`` (and ``demand moe``) to ``app``."""
    app.add_typer(demand_app, name="demand")


@demand_app.command("moe")
def moe(
    ranks: Annotated[int, typer.Argument(help="gpus (N >= 2)")],
    experts_per_gpu: Annotated[int, typer.Option("--experts-per-gpu", help="experts hosted per gpu")] = 2,
    top_k: Annotated[int, typer.Option("--top-k", help="distinct experts each token goes to")] = 2,
    zipf: Annotated[float, typer.Option("--zipf", help="skew of expert popularity (1/i^zipf; 0: uniform)")] = 1.0,
    tokens: Annotated[int, typer.Option("--tokens", help="tokens per gpu")] = 4096,
    seed: Annotated[int, typer.Option("--seed", help="random seed (same arguments, same demand)")] = 0,
    output: Annotated[str, typer.Option("--output", "-o", help="demand file to write")] = "demand.json",
) -> None:
    """A mixture-of-experts dispatch as a demand of token counts (unit weights): each gpu's tokens pick
    top-k experts by a Zipf popularity; tokens for local experts stay home (see synth.demand.moe)."""
    from synth.demand import moe as generate

    output_file(output)
    demand = generate(ranks, experts_per_gpu=experts_per_gpu, top_k=top_k, zipf=zipf, tokens=tokens, seed=seed)
    demand.write(output)
    sent = [sum(row) for row in demand.matrix]
    received = [sum(row[d] for row in demand.matrix) for d in range(ranks)]
    console.print(f"wrote {shown(output)}: {ranks} ranks, {demand.total:,.0f} token sends in all; busiest sender "
                  f"{max(sent) / (sum(sent) / ranks):.2f}x the mean, busiest receiver "
                  f"{max(received) / (sum(received) / ranks):.2f}x (rank {received.index(max(received))})")
