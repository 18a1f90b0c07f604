"""Build the suite's five images, online or offline (``make images``).

    python deploy/docker/build_images.py [--stand-ins] [--tag dev] [--only agent-service ...]

Online (the official python image can be pulled), the images are built from it as the Dockerfiles say.
Where no container registry can be reached (CI, air-gapped sites), or with ``--stand-ins``, stand-ins are
made from Debian's packages first, once (kept until removed with ``docker rmi``):

* the base: ``debootstrap --variant=minbase`` of bookworm with python3 and python3-venv (Python 3.11, as in
  ``python:3.11-slim-bookworm``), a ``python`` link and this machine's CA bundle (``PIP_CERT``, else
  ``/etc/ssl/certs/ca-certificates.crt``: package downloads may pass a TLS-inspecting proxy whose CA only
  this bundle has), then ``docker import``: :data:`STAND_IN_BASE`;
* PostgreSQL and Redis, from Debian's packages on that base (deploy/docker/stand-ins/), for the compose
  override ``deploy/compose/stand-ins.yml``.

Every build runs with ``--network host`` (the package registries are reached from the build as from the
machine). The RAG image takes torch from PyTorch's CPU index; when that cannot be reached the CPU wheel is
copied from ``TORCH_WHEEL_DIR`` (else pip's ``find-links`` folder) into deploy/docker/wheels/ and the image
installs it from there. ``DOCKER_BUILDKIT`` is passed through: both of Docker's builders work.

Prints one JSON line per image built: name, tag, seconds, bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "OFFICIAL_BASE",
    "STAND_INS",
    "STAND_IN_BASE",
    "SUITE_IMAGES",
    "build_suite_image",
    "image_name",
    "main",
    "make_stand_in_base",
    "stage_torch_wheel",
]

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "deploy" / "docker"
WHEELS = DOCKER_DIR / "wheels"
OFFICIAL_BASE = "python:3.11-slim-bookworm"
STAND_IN_BASE = "loopsuite/stand-in-python:3.11-bookworm"
STAND_INS = {
    "loopsuite/stand-in-postgres:15": DOCKER_DIR / "stand-ins" / "postgres.Dockerfile",
    "loopsuite/stand-in-redis:7": DOCKER_DIR / "stand-ins" / "redis.Dockerfile",
}
"""The third-party images of the compose file that Debian packages stand in for (Qdrant has none)."""
SUITE_IMAGES = tuple(sorted(path.name.removesuffix(".Dockerfile") for path in DOCKER_DIR.glob("*.Dockerfile")))
TORCH_PIN = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REGISTRY_PROBE = "https://registry-1.docker.io/v2/"
PYPI_INDEX = "https://pypi.org/simple"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Debian's documentation, manuals, translations and package lists: not needed to run Python.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/lib/apt/lists", "var/cache/apt")


def docker() -> str:
    return os.environ.get("DOCKER", "docker")


def _reachable(url: str, timeout: float = 5.0) -> bool:
    """Any HTTP answer counts (the registry says 401 to an anonymous probe); a refused or silent host does not."""
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False
    return True


def _image_exists(tag: str) -> bool:
    return subprocess.run([docker(), "image", "inspect", tag], capture_output=True).returncode == 0


def make_stand_in_base(tag: str = STAND_IN_BASE) -> None:
    """debootstrap bookworm's Python into a folder and import it as an image (root, debootstrap needed)."""
    bundle = Path(os.environ.get("PIP_CERT") or CA_BUNDLE)
    with tempfile.TemporaryDirectory(prefix="loopsuite-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(rootfs),
                os.environ.get("DEBIAN_MIRROR", DEBIAN_MIRROR),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (rootfs / "usr/bin/python").symlink_to("python3")
        shutil.copyfile(bundle, rootfs / CA_BUNDLE.lstrip("/"))
        for folder in TRIM:
            shutil.rmtree(rootfs / folder, ignore_errors=True)
            (rootfs / folder).mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        changes = [
            f"ENV PIP_CERT={CA_BUNDLE}",
            f"ENV SSL_CERT_FILE={CA_BUNDLE}",
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["python3"]',
        ]
        command = [docker(), "import", *(arg for change in changes for arg in ("--change", change)), "-", tag]
        subprocess.run(command, stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            raise RuntimeError("tar of the stand-in root filesystem failed")


def stage_torch_wheel() -> Path:
    """Copy the CPU wheel of torch into deploy/docker/wheels/ (the RAG image's find-links folder)."""
    folders = [os.environ.get("TORCH_WHEEL_DIR", ""), *os.environ.get("PIP_FIND_LINKS", "").split()]
    folders += _pip_config("find-links")
    version = TORCH_PIN.split("==")[1]
    for folder in filter(None, folders):
        for wheel in sorted(Path(folder).glob(f"torch-{version}+cpu-cp311-*.whl")):
            target = WHEELS / wheel.name
            if not target.exists() or target.stat().st_size != wheel.stat().st_size:
                shutil.copyfile(wheel, target)
            return target
    raise SystemExit(
        f"PyTorch's CPU index cannot be reached and no torch-{version}+cpu wheel was found: set TORCH_WHEEL_DIR"
    )


def _pip_config(key: str) -> list[str]:
    """A value of pip's own configuration (``pip config list``), split on whitespace."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    values = []
    for line in result.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.endswith(f".{key}"):
            values += value.strip("'\"").split()
    return values


def image_name(name: str, tag: str) -> str:
    """The image a Dockerfile is built into: what compose and the Kubernetes manifests run."""
    return f"loopsuite/{name}:{tag}"


def build_suite_image(name: str, tag: str, base: str, build_args: Sequence[str] = ()) -> dict[str, object]:
    image = image_name(name, tag)
    command = [docker(), "build", "--network", "host", "-f", str(DOCKER_DIR / f"{name}.Dockerfile"), "-t", image]
    command += ["--build-arg", f"BASE_IMAGE={base}"]
    for arg in build_args:
        command += ["--build-arg", arg]
    started = time.monotonic()
    subprocess.run([*command, str(ROOT)], check=True, stdout=sys.stderr)
    seconds = round(time.monotonic() - started, 1)
    size = subprocess.run(
        [docker(), "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True, check=True
    )
    return {"image": name, "tag": image, "seconds": seconds, "bytes": int(size.stdout)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default=os.environ.get("LOOPSUITE_TAG", "dev"))
    parser.add_argument("--stand-ins", action="store_true", help="build on the stand-ins even if a registry answers")
    parser.add_argument("--only", nargs="*", choices=SUITE_IMAGES, help="build only these images")
    args = parser.parse_args(argv)

    offline = args.stand_ins or not (_image_exists(OFFICIAL_BASE) or _reachable(REGISTRY_PROBE))
    base = OFFICIAL_BASE
    if offline:
        base = STAND_IN_BASE
        if not _image_exists(STAND_IN_BASE):
            print(f"no container registry: making {STAND_IN_BASE} with debootstrap", file=sys.stderr)
            make_stand_in_base()
        for stand_in, dockerfile in STAND_INS.items():
            if not _image_exists(stand_in):
                subprocess.run(
                    [
                        *(docker(), "build", "--network", "host", "-f", str(dockerfile), "-t", stand_in),
                        *("--build-arg", f"BASE_IMAGE={base}", str(dockerfile.parent)),
                    ],
                    check=True,
                    stdout=sys.stderr,
                )
    for name in args.only or SUITE_IMAGES:
        build_args: list[str] = []
        if name == "mcp-rag-tool" and not _reachable(TORCH_CPU_INDEX + "/torch/"):
            print(f"PyTorch's CPU index is unreachable: torch from {stage_torch_wheel()}", file=sys.stderr)
            build_args.append(f"TORCH_INDEX_URL={os.environ.get('PIP_INDEX_URL', PYPI_INDEX)}")
        print(json.dumps(build_suite_image(name, args.tag, base, build_args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
