# hpcenv step library: manifests are lines "SIZE  SHA256  RELATIVE-PATH" (sha256sum-compatible
# after the size column), sorted by path, excluding the manifest itself.
hpcenv_manifest() {  # DIR: print the manifest of DIR
  local dir=$1 f
  (cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\n' | LC_ALL=C sort |
    while IFS= read -r f; do
      printf '%s  %s  %s\n' "$(stat -c %s -- "$f")" "$(sha256sum -- "$f" | cut -d' ' -f1)" "$f"
    done)
}
hpcenv_verify() {  # DIR MANIFEST: sizes first (cheap), then sha256sum -c
  local dir=$1 manifest=$2 size _sum path actual bad=0
  while read -r size _sum path; do
    [ -n "$path" ] || continue
    if [ ! -f "$dir/$path" ]; then
      echo "verify: missing $dir/$path" >&2; bad=1; continue
    fi
    actual=$(stat -c %s -- "$dir/$path")
    if [ "$actual" != "$size" ]; then
      echo "verify: size of $dir/$path is $actual, manifest says $size" >&2; bad=1
    fi
  done <"$manifest"
  [ "$bad" -eq 0 ] || return 1
  [ -s "$manifest" ] || return 0  # no files: nothing to checksum (sha256sum -c refuses empty input)
  sed -E 's/^[0-9]+  //' "$manifest" | (cd "$dir" && sha256sum --quiet --strict -c -) || {
    echo "verify: checksum mismatch in $dir against $manifest" >&2; return 1
  }
}
hpcenv_publish() {  # TMP DEST FORCE TAG: rename TMP to DEST; replace DEST only when FORCE=1
  local tmp=$1 dest=$2 force=$3 tag=$4 old
  if [ -e "$dest" ] && [ "$force" = 1 ]; then
    old="$dest.hpcenv-old.$tag"
    mv -T -- "$dest" "$old"
    mv -T -- "$tmp" "$dest"
    rm -rf -- "$old"
  else
    mv -n -T -- "$tmp" "$dest"  # rename(2) with RENAME_NOREPLACE: never overwrites
    if [ -e "$tmp" ]; then
      rm -rf -- "$tmp"
      echo "publish: $dest already exists; not overwriting (use --force)" >&2
      return 3
    fi
  fi
}
