"""`--push` and `--dry-run`: create or update each Space on the Hub, its hardware, its secret and its files."""

from __future__ import annotations

import os
from pathlib import Path

from .render import front_matter, host
from .schema import Fleet, Space


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def plan(space: Space, fleet: Fleet, files: list[str], env=None) -> list[str]:
    env = os.environ if env is None else env
    repo = f"{fleet.owner}/{space.name}"
    secret = space.api_key_secret
    has_key = bool(env.get(secret))
    lines = [
        f"Space {repo}",
        f"  url:      https://huggingface.co/spaces/{repo}  (app: https://{host(fleet.owner, space.name)})",
        f"  repo:     create or update {repo} (type space, sdk gradio, {'private' if space.private else 'public'})",
        f"  hardware: {space.flavor} (ZeroGPU, size {space.hardware['size']})",
        f"  preload:  {', '.join(front_matter(space, fleet)['preload_from_hub'])} (at build, README preload_from_hub)",
        "  secrets:  BLINK_API_KEY "
        + (f"<- ${secret} (set)" if has_key else f"(${secret} not set: the Space's existing secret is left as it is)"),
        f"  upload:   {len(files)} files; remote files not among them are deleted",
    ]
    lines += [f"            {rel}" for rel in files]
    return lines


def push(fleet: Fleet, folders: dict[str, Path], api=None, env=None, echo=print) -> None:
    env = os.environ if env is None else env
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    for space in fleet.spaces:
        repo = f"{fleet.owner}/{space.name}"
        folder = folders[space.name]
        echo(f"{repo}: create or update")
        api.create_repo(
            repo,
            repo_type="space",
            space_sdk="gradio",
            space_hardware=space.flavor,
            private=space.private,
            exist_ok=True,
        )
        runtime = api.get_space_runtime(repo)  # exist_ok leaves an existing Space's hardware as it was
        if space.flavor not in (runtime.hardware, runtime.requested_hardware):
            echo(f"{repo}: request hardware {space.flavor}")
            api.request_space_hardware(repo, space.flavor)
        key = env.get(space.api_key_secret)
        if key:
            echo(f"{repo}: secret BLINK_API_KEY (from ${space.api_key_secret})")
            api.add_space_secret(repo, "BLINK_API_KEY", key)
        echo(f"{repo}: upload {len(files_of(folder))} files, deleting stale ones")
        api.upload_folder(
            repo_id=repo,
            repo_type="space",
            folder_path=str(folder),
            delete_patterns=["*"],
            commit_message=f"build.py: {space.name} ({space.model}@{space.revision})",
        )
        echo(f"{repo}: done -> https://huggingface.co/spaces/{repo}")
