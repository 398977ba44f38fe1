"""Edits of one call's argument list with libcst, for `--fix`: set an argument, drop one.

Comments are the hard part: libcst stores them in the whitespace between arguments, so an
edit that moves or drops whitespace moves or drops comments. The rules kept here:
- a comment stays on the line it was on, with the argument it annotates;
- a new keyword goes after the last argument (on a line of its own when the arguments are
  one per line), never between an argument and its comment;
- the comment of a removed argument is never dropped: it keeps its own line (one argument
  per line) or the line it shared with the call.
"""

from __future__ import annotations

import libcst as cst

Whitespace = cst.BaseParenthesizableWhitespace
NEW_LINE_INDENT = "    "  # a new argument under `f(  # comment` gets the usual 4-space hanging indent


def set_argument(call: cst.Call, name: str, value: str, position: int | None = None) -> cst.Call:
    """`name=value`: replace the keyword's value, or the positional argument at `position`, or
    add the keyword. Never adds a keyword the call may already pass (positionally or by **)."""
    args = list(call.args)
    new_value = cst.parse_expression(value)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=new_value)
            return call.with_changes(args=args)
    if position is not None and position < len(args):
        if args[position].keyword is not None or args[position].star or any(a.star for a in args[:position]):
            return call  # cannot tell which argument is `name`: leave the call alone
        args[position] = args[position].with_changes(value=new_value)
        return call.with_changes(args=args)
    if any(a.star for a in args):
        return call  # `*args`/`**kwargs` may already pass it
    new = cst.Arg(value=new_value, keyword=cst.Name(name),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if not args:
        return _first_argument(call, new)
    return call.with_changes(args=[*args[:-1], *_append(call, args, new)])


def _first_argument(call: cst.Call, new: cst.Arg) -> cst.Call:
    opening = call.whitespace_before_args
    if not isinstance(opening, cst.ParenthesizedWhitespace):
        return call.with_changes(args=[new])
    # `x.cuda(  # why\n)`: the new argument gets a line of its own under the comment and the
    # closing parenthesis keeps its line and indentation
    closing_indent = opening.last_line.value
    return call.with_changes(
        whitespace_before_args=opening.with_changes(last_line=cst.SimpleWhitespace(closing_indent + NEW_LINE_INDENT)),
        args=[new.with_changes(whitespace_after_arg=cst.ParenthesizedWhitespace(
            indent=opening.indent, last_line=cst.SimpleWhitespace(closing_indent)))])


def _append(call: cst.Call, args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """[last argument, new argument], laid out as the call lays out its arguments."""
    last = args[-1]
    before_last = args[-2].comma.whitespace_after if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma) \
        else call.whitespace_before_args
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    if not isinstance(before_last, cst.ParenthesizedWhitespace):
        # arguments on one line: the new one follows the last on the same line, and whatever
        # ended the call (a trailing comma, a comment at the end of the line) now ends it
        return [last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                  whitespace_after_arg=cst.SimpleWhitespace("")),
                new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)]
    # one argument per line: the last keeps its line and its comment, the new one gets the next
    # line at the same indentation, and what stood before `)` (own-line comments) follows it
    end = trailing.whitespace_after if trailing else last.whitespace_after_arg
    next_line = cst.ParenthesizedWhitespace(indent=before_last.indent, last_line=before_last.last_line)
    if isinstance(end, cst.ParenthesizedWhitespace):
        next_line = next_line.with_changes(first_line=end.first_line)
        end = end.with_changes(first_line=cst.TrailingWhitespace())
    comma = (trailing if trailing is not None else cst.Comma()).with_changes(whitespace_after=next_line)
    if trailing:
        return [last.with_changes(comma=comma), new.with_changes(comma=cst.Comma(whitespace_after=end))]
    return [last.with_changes(comma=comma, whitespace_after_arg=cst.SimpleWhitespace("")),
            new.with_changes(whitespace_after_arg=end)]


def drop_argument(call: cst.Call, name: str, position: int | None = None) -> cst.Call:
    """Remove the `name` argument (by keyword, or positionally at `position`), keeping comments."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == name), None)
    if index is None and position is not None and position < len(args) and args[position].keyword is None \
            and not any(a.star for a in args[:position + 1]):
        index = position
    if index is None:
        return call
    removed = args.pop(index)
    after, orphans = _after_removed(removed)
    if not args:  # `zero_grad(set_to_none=False)` → `zero_grad()`
        gap = _join(call.whitespace_before_args, after, orphans, closing=True)
        return call.with_changes(args=[], whitespace_before_args=gap)
    if index < len(args):  # the next argument takes the removed one's place
        if index == 0:
            return call.with_changes(args=args, whitespace_before_args=_join(
                call.whitespace_before_args, after, orphans, closing=False))
        previous = args[index - 1]
        args[index - 1] = previous.with_changes(comma=previous.comma.with_changes(
            whitespace_after=_join(previous.comma.whitespace_after, after, orphans, closing=False)))
        return call.with_changes(args=args)
    # the last argument went: the one before it now ends the call as the removed one did
    previous = args[-1]
    gap = _join(previous.comma.whitespace_after, after, orphans, closing=True)
    if isinstance(removed.comma, cst.Comma):
        args[-1] = previous.with_changes(comma=previous.comma.with_changes(whitespace_after=gap))
    else:
        args[-1] = previous.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=gap)
    return call.with_changes(args=args)


def _after_removed(arg: cst.Arg) -> tuple[Whitespace, list[cst.Comment]]:
    """The whitespace between a removed argument and the next token, and the removed argument's
    own comments (those on its line; own-line comments after it belong to what follows)."""
    if isinstance(arg.comma, cst.Comma):
        after = arg.comma.whitespace_after
        orphans = _comments(arg.whitespace_after_arg) + _comments(arg.comma.whitespace_before)
    else:
        after, orphans = arg.whitespace_after_arg, []
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        orphans.append(after.first_line.comment)
    return after, orphans


def _join(before: Whitespace, after: Whitespace, orphans: list[cst.Comment], closing: bool) -> Whitespace:
    """The whitespace that replaces `before <removed argument> after`.

    `before` may end the previous argument's line (its comment stays there); `orphans` are the
    removed argument's comments, `after`'s own-line comments belong to what follows. The next
    token (an argument, or `)` when `closing`) keeps `after`'s indentation."""
    before_paren = isinstance(before, cst.ParenthesizedWhitespace)
    after_paren = isinstance(after, cst.ParenthesizedWhitespace)
    following = list(after.empty_lines) if after_paren else []
    if not orphans and not following:
        if not before_paren:
            return before if not closing else after
        if not after_paren and not _comments(before):
            return after if closing else before
    if before_paren:
        first_line, lines = before.first_line, list(before.empty_lines)
        # the removed argument had a line of its own: its comments keep one, at its indentation
        lines += [cst.EmptyLine(indent=before.indent, whitespace=before.last_line, comment=c) for c in orphans]
    elif orphans:  # the removed argument shared the line before it: so does its comment
        first_line = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=orphans[0])
        lines = [cst.EmptyLine(comment=c) for c in orphans[1:]]
    else:
        first_line, lines = cst.TrailingWhitespace(), []
    if after_paren:
        indent, last_line = after.indent, after.last_line
    elif before_paren and not closing:
        indent, last_line = before.indent, before.last_line
    else:
        indent, last_line = True, cst.SimpleWhitespace("")
    return cst.ParenthesizedWhitespace(first_line=first_line, empty_lines=lines + following, indent=indent,
                                       last_line=last_line)


def _comments(whitespace: Whitespace) -> list[cst.Comment]:
    if not isinstance(whitespace, cst.ParenthesizedWhitespace):
        return []
    found = [whitespace.first_line.comment] if whitespace.first_line.comment else []
    return found + [line.comment for line in whitespace.empty_lines if line.comment is not None]
