# hpcenv step library. A manifest has one line per file, "SIZE  SHA256  RELATIVE-PATH"
# (sha256sum-compatible after the size column), sorted by the path's bytes (LC_ALL=C), without
# the manifest itself. Datasets hold regular files and folders only: symbolic links, special
# files and names with a newline or a backslash are refused, here and in hpcenv/jobs/staging.py
# alike. Results are published under a lock beside the destination, from a mktemp name.
hpcenv_check_tree() {  # DIR: fail on links, special files and names a manifest cannot hold
  local dir=$1 f bad=0
  while IFS= read -r -d '' f; do
    echo "manifest: $dir/$f is a link or special file; datasets hold regular files only" >&2
    bad=1
  done < <(cd "$dir" && find . -mindepth 1 ! -type f ! -type d -printf '%P\0')
  while IFS= read -r -d '' f; do
    case $f in
      *$'\n'* | *\\*)
        echo "manifest: file name not allowed in a manifest: $(printf '%q' "$f")" >&2
        bad=1
        ;;
    esac
  done < <(cd "$dir" && find . -mindepth 1 -printf '%P\0')
  return "$bad"
}
hpcenv_manifest() {  # DIR: print the manifest of DIR
  local dir=$1 f
  hpcenv_check_tree "$dir" || return 1
  (cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\0' | LC_ALL=C sort -z |
    while IFS= read -r -d '' f; do
      printf '%s  %s  %s\n' "$(stat -c %s -- "$f")" "$(sha256sum -- "$f" | cut -d' ' -f1)" "$f"
    done)
}
hpcenv_verify() {  # DIR MANIFEST: exactly the listed files; sizes first (cheap), then sha256
  local dir=$1 manifest=$2 line size rest digest path actual extra bad=0 listed=""
  hpcenv_check_tree "$dir" || return 1
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] || continue
    size=${line%%  *} rest=${line#*  }
    digest=${rest%%  *} path=${rest#*  }
    if ! [[ $size =~ ^[0-9]+$ && $digest =~ ^[0-9a-f]{64}$ ]] || [ "$path" = "$rest" ]; then
      echo "verify: malformed line in $manifest: $(printf '%q' "$line")" >&2
      bad=1
      continue
    fi
    case /$path/ in
      //* | */../* | */./* | *//*)
        echo "verify: $(printf '%q' "$path") in $manifest leaves $dir; refused" >&2
        bad=1
        continue
        ;;
    esac
    listed+=$path$'\n'
    if [ ! -f "$dir/$path" ]; then
      echo "verify: missing $dir/$path" >&2
      bad=1
      continue
    fi
    actual=$(stat -c %s -- "$dir/$path")
    if [ "$actual" != "$size" ]; then
      echo "verify: size of $dir/$path is $actual, manifest says $size" >&2
      bad=1
    fi
  done <"$manifest"
  while IFS= read -r extra; do
    [ -z "$extra" ] || { echo "verify: $dir/$extra is not in the manifest" >&2; bad=1; }
  done < <(LC_ALL=C comm -13 <(printf '%s' "$listed" | LC_ALL=C sort) \
    <(cd "$dir" && find . -type f ! -name .hpcenv-manifest -printf '%P\n' | LC_ALL=C sort))
  [ "$bad" -eq 0 ] || return 1
  [ -s "$manifest" ] || return 0  # no files: nothing to checksum (sha256sum -c refuses empty input)
  sed -E 's/^[0-9]+  //' "$manifest" | (cd "$dir" && sha256sum --quiet --strict -c -) || {
    echo "verify: checksum mismatch in $dir against $manifest" >&2
    return 1
  }
}
hpcenv_identity() {  # PATH: what PATH is now: "absent", or its device:inode and change time
  if [ -e "$1" ] || [ -L "$1" ]; then stat -c '%d:%i:%z' -- "$1"; else echo absent; fi
}
hpcenv_mode_like_umask() {  # PATH: the mode a new file gets (mktemp makes 0600/0700)
  local base=0666
  [ -d "$1" ] && base=0777
  chmod "$(printf '%04o' $((base & ~0$(umask))))" -- "$1"
}
hpcenv_publish() {  # TMP DEST FORCE SEEN: rename TMP to DEST under DEST's lock
  # SEEN is hpcenv_identity DEST from when the step began: if DEST changed since (another job
  # published there), nothing is replaced. An existing DEST is replaced only with FORCE=1.
  # Exit 3 when refused; the caller removes TMP.
  local tmp=$1 dest=$2 force=$3 seen=$4 old
  exec 9>"$dest.hpcenv-lock"
  flock 9
  if [ "$(hpcenv_identity "$dest")" != "$seen" ]; then
    echo "publish: $dest changed while this step ran (another job wrote it); not overwriting" >&2
    return 3
  fi
  if [ "$seen" = absent ]; then
    mv -n -T -- "$tmp" "$dest" # rename(2) with RENAME_NOREPLACE: never overwrites
    if [ -e "$tmp" ]; then
      echo "publish: $dest appeared meanwhile; not overwriting" >&2
      return 3
    fi
  elif [ "$force" != 1 ]; then
    echo "publish: $dest already exists; not overwriting (use --force)" >&2
    return 3
  elif [ -d "$dest" ] && [ ! -L "$dest" ]; then
    old=$(mktemp -d -- "$dest.hpcenv-old.XXXXXX")
    mv -T -- "$dest" "$old"
    mv -T -- "$tmp" "$dest" || { mv -T -- "$old" "$dest"; return 1; }
    rm -rf -- "$old"
  else
    mv -f -T -- "$tmp" "$dest" # one rename replaces a file atomically
  fi
  exec 9>&-
}
