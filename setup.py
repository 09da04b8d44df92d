"""Packaging for local_knowledge_trainer: everything is read from settings.ini (no pkg_resources)."""
from configparser import ConfigParser
from pathlib import Path
import setuptools

here = Path(__file__).parent
cfg = ConfigParser(delimiters=["="])
cfg.read(here / "settings.ini", encoding="utf-8")
cfg = cfg["DEFAULT"]

def _list(key): return cfg.get(key, "").split()

# An SPDX license expression (PEP 639) instead of a "License ::" classifier, which setuptools >= 77 deprecates.
licenses = {"apache2": "Apache-2.0"}
statuses = ["1 - Planning", "2 - Pre-Alpha", "3 - Alpha", "4 - Beta", "5 - Production/Stable"]
lic = licenses.get(cfg["license"].lower(), cfg["license"])
readme = here / "README.md"

setuptools.setup(
    name=cfg["lib_name"].replace("_", "-"),
    version=cfg["version"],
    description=cfg["description"],
    long_description=readme.read_text(encoding="utf-8") if readme.exists() else "",
    long_description_content_type="text/markdown",
    author=cfg["author"], author_email=cfg["author_email"],
    license=lic, license_files=["LICENSE"], url=cfg["git_url"], keywords=cfg.get("keywords", ""),
    classifiers=[f"Development Status :: {statuses[int(cfg['status']) - 1]}",
                 f"Intended Audience :: {cfg['audience']}",
                 f"Natural Language :: {cfg['language']}"]
                + [f"Programming Language :: Python :: {v}" for v in ("3.10", "3.11", "3.12")],
    packages=setuptools.find_packages(include=[cfg["lib_path"], cfg["lib_path"] + ".*"]),
    include_package_data=True,
    # hand-written assets beside the exported modules: the search page of `lkt serve` (serve.py serves them)
    package_data={cfg["lib_path"]: ["static/serve/*.html", "static/serve/*.js", "static/serve/*.css", "static/serve/*.svg"]},
    python_requires=">=" + cfg["min_python"],
    install_requires=_list("requirements"),
    extras_require={"dev": _list("dev_requirements"), "chroma": ["chromadb"], "cluster": _list("cluster_requirements"),
                    "notebook": _list("notebook_requirements")},
    entry_points={"console_scripts": _list("console_scripts"), "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    zip_safe=False,
)
