"""The records table's columns a database made by an older agentq may lack
until ``agentq init`` adds them: the rare status (:mod:`.rare_index`), the
owner (:mod:`.owner_index`) and the tool (:mod:`.tool_index`). The backend
asks once whether each is there; until it is, listings filter the records'
JSON as the older agentq did, and writes leave it out."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from agentq.backends.spanner import owner_index, rare_index, tool_index

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["AddedColumns"]


class AddedColumns:
    """Whether the records table has each added column (asked once), and what
    ``agentq init`` does for them after its DDL."""

    _rare_column: bool | None = None
    _runs_in_index: bool | None = None
    _owner_column: bool | None = None
    _runs_owned: bool | None = None
    _tool_column: bool | None = None
    _runs_named: bool | None = None

    def _backend(self) -> SpannerBackend:
        return cast("SpannerBackend", self)

    def _columns_before_ddl(self) -> tuple[bool, bool, bool]:
        """Whether the table had the rare-status, owner and tool columns before
        the DDL (True too when there is no table: nothing to fill)."""
        b = self._backend()
        return (
            bool(self._rare_column) or rare_index.has_column(b) is not False,
            bool(self._owner_column) or owner_index.OWNER.has_column(b) is not False,
            bool(self._tool_column) or tool_index.TOOL.has_column(b) is not False,
        )

    def _fill_after_ddl(self, had: tuple[bool, bool, bool]) -> None:
        """Fill the columns the DDL just added, for the records already stored."""
        b = self._backend()
        rare_index.bring_forward(b, had[0])
        self._runs_in_index = True
        owner_index.OWNER.bring_forward(b, had[1])
        self._runs_owned = True
        tool_index.TOOL.bring_forward(b, had[2])
        self._runs_named = True
        self._rare_column = self._owner_column = self._tool_column = True

    @property
    def rare_column(self) -> bool:
        """Whether records carry their rare status and listings walk its index
        (:mod:`.rare_index`); False until ``agentq init`` upgrades an old database."""
        if self._rare_column is None:
            self._rare_column = rare_index.has_column(self._backend()) is True
        return self._rare_column

    @property
    def runs_in_index(self) -> bool:
        """Whether listings of runs may walk the index (:func:`.rare_index.runs_in_index`)."""
        if self._runs_in_index is None:
            self._runs_in_index = rare_index.runs_in_index(self._backend())
        return self._runs_in_index

    @property
    def owner_column(self) -> bool:
        """Whether tasks carry their owner and owner listings walk its indexes
        (:mod:`.owner_index`); False until ``agentq init`` upgrades an old database."""
        if self._owner_column is None:
            self._owner_column = owner_index.OWNER.has_column(self._backend()) is True
        return self._owner_column

    @property
    def runs_owned(self) -> bool:
        """Whether listings of an owner's runs may walk the owner index
        (:meth:`.name_columns.NameColumn.runs_filled`)."""
        if self._runs_owned is None:
            self._runs_owned = owner_index.OWNER.runs_filled(self._backend())
        return self._runs_owned

    @property
    def tool_column(self) -> bool:
        """Whether tasks carry their tool (and runs their agent) and tool listings
        walk its index (:mod:`.tool_index`); False until ``agentq init`` upgrades
        an old database."""
        if self._tool_column is None:
            self._tool_column = tool_index.TOOL.has_column(self._backend()) is True
        return self._tool_column

    @property
    def runs_named(self) -> bool:
        """Whether listings of an agent's runs may walk the tool index
        (:meth:`.name_columns.NameColumn.runs_filled`)."""
        if self._runs_named is None:
            self._runs_named = tool_index.TOOL.runs_filled(self._backend())
        return self._runs_named
