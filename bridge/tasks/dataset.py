"""RepoGenesis dataset import: serve a RepoGenesis checkout's tasks under their upstream names.

Layout (docs/upstream.md §1): `repo/<Task>/` holds the README and
golden tests (`tests/` for Python, `src/test/` for Java) plus task-root extras;
`repo_readme_verified_python_no_t/<Task>/README.md` and
`repo_readme_verified_java_no_t_with_p/<Task>/{README.md,pom.xml}` hold the README variants the
agents were given. A task with no golden tests is an error, never an empty suite (upstream W1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bridge.errors import TaskError
from bridge.tasks.model import (
    TEST_EXTRA_NAMES,
    Manifest,
    Seed,
    Task,
    Timeouts,
    compute_task_hash,
    has_test_files,
)
from bridge.tasks.statcache import remembered, tree_files
from bridge.tasks.suite import agent_imports


@dataclass(frozen=True)
class UpstreamSpec:
    lang: str
    port: int
    framework: str


#: The 30 Verified tasks: name -> language, README port, framework (public facts of REPO_SPECS).
VERIFIED_SPECS: dict[str, UpstreamSpec] = {
    "Blog": UpstreamSpec("python", 8000, "fastapi"),
    "Chatroom": UpstreamSpec("python", 8083, "any"),
    "Customization": UpstreamSpec("python", 8082, "fastapi"),
    "Data_Rank_Searcher": UpstreamSpec("python", 8080, "any"),
    "django-rest-framework-crud": UpstreamSpec("python", 8000, "django"),
    "eve": UpstreamSpec("python", 5001, "eve"),
    "File_Relay": UpstreamSpec("python", 8085, "any"),
    "flask": UpstreamSpec("python", 5000, "flask"),
    "GameBackend": UpstreamSpec("python", 8080, "any"),
    "mail_service": UpstreamSpec("python", 8080, "any"),
    "Multilingual": UpstreamSpec("python", 5000, "flask"),
    "rock-paper-scissors-flask": UpstreamSpec("python", 5000, "flask"),
    "simple-rbac-service": UpstreamSpec("python", 8080, "any"),
    "SimpleFastPyAPI": UpstreamSpec("python", 8000, "fastapi"),
    "StructuredDataConvertor": UpstreamSpec("python", 8000, "any"),
    "synapse": UpstreamSpec("python", 8080, "any"),
    "TaskManagement": UpstreamSpec("python", 8080, "any"),
    "Tic-Tac-Toe": UpstreamSpec("python", 8082, "any"),
    "Timer4Tasker": UpstreamSpec("python", 8080, "any"),
    "UserManagement": UpstreamSpec("python", 8081, "any"),
    "UserManagement_2": UpstreamSpec("python", 8080, "any"),
    "WebPan": UpstreamSpec("python", 8080, "any"),
    "javalin-online-judge": UpstreamSpec("java", 7000, "javalin"),
    "javalin-task-manager": UpstreamSpec("java", 7000, "javalin"),
    "javalin-user-auth-platform": UpstreamSpec("java", 7070, "javalin"),
    "micronaut-ci-status": UpstreamSpec("java", 8080, "micronaut"),
    "quarkus-blog-cms": UpstreamSpec("java", 8080, "quarkus"),
    "spark-dashboard-backend": UpstreamSpec("java", 4567, "spark"),
    "spring-boot-course-scheduling": UpstreamSpec("java", 8080, "springboot"),
    "springboot-chat-gateway": UpstreamSpec("java", 8080, "springboot"),
}

README_DIRS = {
    "python": "repo_readme_verified_python_no_t",
    "java": "repo_readme_verified_java_no_t_with_p",
}


def upstream_test_env(port: int) -> dict[str, str]:
    """The base-URL variables the upstream suites read, set consistently (reference §1.3)."""
    return {
        "SERVICE_BASE_URL": f"http://127.0.0.1:{port}",
        "API_BASE_URL": f"http://localhost:{port}/api/v1",
        "SYNAPSE_BASE_URL": f"http://localhost:{port}",
    }


def is_dataset_checkout(root: Path) -> bool:
    return (root / "repo").is_dir()


def load_dataset_task(root: Path, name: str) -> Task:
    """Load one Verified task from a RepoGenesis checkout rooted at `root`."""
    spec = VERIFIED_SPECS.get(name)
    if spec is None:
        raise TaskError(f"{root}: {name!r} is not one of the 30 RepoGenesis Verified tasks")
    task_root = root / "repo" / name
    if not task_root.is_dir():
        raise TaskError(f"{task_root}: task folder is missing from the dataset")
    tests_dir = task_root / ("tests" if spec.lang == "python" else "src/test")
    if not tests_dir.is_dir() or not has_test_files(tests_dir):
        raise TaskError(f"{tests_dir}: golden tests are missing (refusing to grade against an empty suite)")
    variant_dir = root / README_DIRS[spec.lang] / name
    readme = variant_dir / "README.md"
    if not readme.is_file():
        readme = task_root / "README.md"
    if not readme.is_file():
        raise TaskError(f"{task_root}: README.md is missing")
    seeds: dict[str, Path] = {}
    extras: dict[str, Path] = {}
    if spec.lang == "java":
        pom = variant_dir / "pom.xml"
        if pom.is_file():
            seeds["pom.xml"] = pom
    else:
        reqs = task_root / "requirements.txt"
        if reqs.is_file():
            seeds["requirements.txt"] = reqs  # upstream gives it to agents as "reference requirements"
    for extra in TEST_EXTRA_NAMES:
        candidate = task_root / extra
        if candidate.is_file():
            extras[extra] = candidate
    is_python = spec.lang == "python"
    manifest = Manifest(
        id=name,
        title=name,
        lang=spec.lang,
        framework=spec.framework,
        port=spec.port,
        difficulty="unrated",
        version="upstream",
        timeouts=Timeouts(build=600, startup=15 if is_python else 20, tests=300 if is_python else 600, session=0),
        seed=Seed(files=sorted(seeds)),
        test_env=upstream_test_env(spec.port),
        # Declared from the golden files: a suite importing `app...` it does not ship (Blog).
        white_box=is_python
        and bool(remembered("agent-imports", "", tree_files(tests_dir), lambda: agent_imports(tests_dir))),
    )
    task = Task(
        manifest=manifest,
        root=task_root.resolve(),
        readme_path=readme.resolve(),
        tests_dir=tests_dir.resolve(),
        solution_dir=None,
        seed_files={k: v.resolve() for k, v in seeds.items()},
        test_extras={k: v.resolve() for k, v in extras.items()},
        source="dataset",
    )
    task.content_hash = compute_task_hash(manifest, readme, tests_dir, task.test_extras)
    return task


def load_dataset(root: Path) -> tuple[list[Task], dict[str, str]]:
    """All Verified tasks present in the checkout, plus task name -> error line for broken ones."""
    root = Path(root)
    if not is_dataset_checkout(root):
        raise TaskError(f"{root}: not a RepoGenesis checkout (no repo/ folder)")
    tasks: list[Task] = []
    errors: dict[str, str] = {}
    for entry in sorted((root / "repo").iterdir(), key=lambda p: p.name):
        if not entry.is_dir() or entry.name not in VERIFIED_SPECS:
            continue
        try:
            tasks.append(load_dataset_task(root, entry.name))
        except TaskError as exc:
            errors[entry.name] = str(exc)
    return tasks, errors
