"""(work in progress)"""
