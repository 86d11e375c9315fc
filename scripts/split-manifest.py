#!/usr/bin/env python3
"""The client's split manifest, read from wasm-split's loader.

Usage: split-manifest.py PKG_DIR > PKG_DIR/__wasm_split_manifest.json

For each split point (a page group's `#[lazy]` function, named as Leptos registers it when
the server renders one of its pages) the files the browser fetches the first time
the page's code runs: the page's own chunk and the shared chunks it needs,
as names without `.wasm`. The server turns the entries of the page it
renders into `<link rel=preload>` (app/src/shell.rs); scripts/size-budget.sh
adds them up per page.
"""
import glob
import json
import re
import sys


def file_of(fetcher):
    m = re.search(r'"\./([^"]+)\.wasm"', fetcher)
    return m.group(1) if m else None


def manifest(pkg):
    [loader] = glob.glob(f"{pkg}/__wasm_split.*.js")
    js = open(loader).read()
    # `const __chunk_N = makeLoad(<fetcher>, []);` and
    # `export const __wasm_split_load_<split> = wrapAsyncCb(makeLoad(<fetcher>, [deps]));`
    # An empty module's fetcher names no file.
    chunks = {name: file_of(body) for name, body in re.findall(r"const (__chunk_\d+) = makeLoad\((.*?), \[\]\);", js, re.S)}
    splits = {}
    for name, body, deps in re.findall(
        r"export const __wasm_split_load_(\w+) = wrapAsyncCb\(makeLoad\((.*?), \[(.*?)\]\)\);", js, re.S
    ):
        files = [file_of(body)] + [chunks[d.strip()] for d in deps.split(",") if d.strip()]
        splits[name] = sorted({f for f in files if f})
    if not splits:
        sys.exit(f"no split points found in {loader}: is the client split?")
    return splits


if __name__ == "__main__":
    json.dump(manifest(sys.argv[1]), sys.stdout, indent=1, sort_keys=True)
    print()
